"""``deltalog acls``: Kafka's ``kafka-acls.sh`` on the store's ACLs (:mod:`deltalog.acls`), which every ``deltalog serve``
with ``authorizer.class.name`` enforces::

    deltalog acls --add --allow-principal User:alice --operation Read --operation Write \\
        --topic orders- --resource-pattern-type prefixed
    deltalog acls --add --allow-principal User:alice --operation Read --group orders-app
    deltalog acls --list [--topic orders-] [--principal User:alice]
    deltalog acls --remove --allow-principal User:alice --operation Write --topic orders- --resource-pattern-type prefixed

As Kafka's ``AclCommand``: ``--add`` makes one binding per resource x principal x host x operation (hosts default to
``*``, ``--operation`` to ALL; ``--resource-pattern-type`` LITERAL); ``--list`` and ``--remove`` match resources with
the pattern type given (ANY when none, MATCH to list what applies to a name), and ``--remove`` without a principal or
operation removes every binding of the resources named. This command writes the store directly, with the store's
credentials: it is not itself subject to the ACLs (see docs/kafka-endpoint.md).
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "acls", help="list, add and remove the ACLs deltalog serve enforces (kafka-acls)",
        description="The store's ACLs (Kafka's kafka-acls.sh): what each principal may do through deltalog serve "
        "when authorizer.class.name is set. Operations: Read, Write, Create, Delete, Alter, Describe, "
        "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="list the ACLs (of the resources given, or all)")
    what.add_argument("--add", action="store_true", help="add ACLs")
    what.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                   help="with --list: only this principal's ACLs")
    p.add_argument("--allow-host", action="append", default=[], metavar="IP", help="default '*'")
    p.add_argument("--deny-host", action="append", default=[], metavar="IP", help="default '*'")
    p.add_argument("--operation", action="append", default=[], metavar="OP", help="default All")
    p.add_argument("--topic", action="append", default=[], metavar="NAME")
    p.add_argument("--group", action="append", default=[], metavar="NAME")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None, metavar="TYPE",
                   help="literal (the default of --add), prefixed; with --list/--remove also any (their default), "
                   "match")
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls scripts; nothing is asked")
    output.add_output_option(p, text="kafka-acls' lines", json_help="one object per ACL")
    common.add_store_option(p)
    p.set_defaults(func=acls_command)


def _enum(kind: type, text: str, flag: str) -> object:
    key = text.strip().upper().replace("-", "_")
    key = {"CLUSTERACTION": "CLUSTER_ACTION", "DESCRIBECONFIGS": "DESCRIBE_CONFIGS", "ALTERCONFIGS": "ALTER_CONFIGS",
           "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE"}.get(key, key)
    try:
        return kind[key]  # type: ignore[index]
    except KeyError:
        names = [m.name for m in kind if m.name not in ("UNKNOWN", "ANY")]  # type: ignore[attr-defined]
        raise UsageError(f"{flag} {text!r} is not one of {', '.join(names)}") from None


def _resources(args: argparse.Namespace) -> list[tuple[object, str]]:
    from deltalog.acls import CLUSTER_NAME, ResourceType

    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _print(bindings: list, verb: str) -> None:
    by_resource: dict[tuple, list] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    for (rt, name, pt), bs in by_resource.items():
        print(f"{verb} ACLs for resource `ResourcePattern(resourceType={rt.name}, name={name}, "
              f"patternType={pt.name})`: ")
        for b in bs:
            print(f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                  f"permissionType={b.permission.name})")
        print()


def acls_command(args: argparse.Namespace) -> int:
    from deltalog.acls import (
        AclBinding,
        AclFilter,
        AclOperation,
        AclPermissionType,
        AclStore,
        PatternType,
        check_principal,
    )

    resources = _resources(args)
    ops = [_enum(AclOperation, o, "--operation") for o in args.operation]
    pattern = None if args.resource_pattern_type is None else _enum(PatternType, args.resource_pattern_type,
                                                                     "--resource-pattern-type")
    entries = [(check_principal(pr), AclPermissionType.ALLOW, h) for pr in args.allow_principal
               for h in args.allow_host or ["*"]]
    entries += [(check_principal(pr), AclPermissionType.DENY, h) for pr in args.deny_principal
                for h in args.deny_host or ["*"]]
    store = common.open_store(args, create=args.add)
    acl_store = AclStore(store.storage)
    if args.add:
        if not resources:
            raise UsageError("--add needs a resource: --topic, --group, --transactional-id or --cluster")
        if not entries:
            raise UsageError("--add needs --allow-principal or --deny-principal")
        if pattern not in (None, PatternType.LITERAL, PatternType.PREFIXED):
            raise UsageError("--add takes --resource-pattern-type literal or prefixed")
        new = [AclBinding(rt, name, pattern or PatternType.LITERAL, pr, host, op, perm)
               for rt, name in resources for pr, perm, host in entries for op in ops or [AclOperation.ALL]]
        acl_store.create(new)
        if output.wants_json(args):
            for b in new:
                output.emit(b.to_json())
        else:
            _print(new, "Adding")
        return 0
    filters = [AclFilter(rt, name, pattern or PatternType.ANY) for rt, name in resources] or [AclFilter()]
    if args.remove:
        if not resources:
            raise UsageError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
        narrowed = [AclFilter(f.resource_type, f.resource_name, f.pattern_type, pr, host, op, perm)
                    for f in filters for pr, perm, host in entries or [(None, AclPermissionType.ANY, None)]
                    for op in ops or [AclOperation.ANY]]
        removed = [b for bs in acl_store.delete(narrowed) for b in bs]
        if output.wants_json(args):
            for b in removed:
                output.emit(b.to_json())
        else:
            _print(removed, "Removed")
        return 0
    principals = [check_principal(pr) for pr in args.principal] or [None]
    found = sorted({b for f in filters for pr in principals
                    for b in acl_store.describe(AclFilter(f.resource_type, f.resource_name, f.pattern_type, pr))})
    if output.wants_json(args):
        for b in found:
            output.emit(b.to_json())
    else:
        _print(found, "Current")
    return 0
