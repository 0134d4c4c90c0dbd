"""``deltalog configs``: Kafka's ``kafka-configs.sh`` for users' SCRAM credentials (``--entity-type users``).

    deltalog configs --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    deltalog configs --alter --entity-type users --entity-name alice --delete-config 'SCRAM-SHA-512'
    deltalog configs --describe --entity-type users [--entity-name alice]

As Kafka's ``ConfigCommand``: ``--user alice`` is short for ``--entity-type users --entity-name alice``; an
iteration count left out is 4096 (``ScramMechanism.minIterations``); the password is salted and only the salt,
iteration count, stored key and server key are kept (:mod:`deltalog.scram`); ``--describe`` prints Kafka's line
(``SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192``), never a secret.

Topic configs as kafka-configs users script them (``--entity-type topics``, or ``--topic T``), the same change as
``deltalog topics alter``::

    deltalog configs --alter --entity-type topics --entity-name orders \
        --add-config 'cleanup.policy=compact,min.cleanable.dirty.ratio=0.1' --delete-config segment.ms
    deltalog configs --describe --entity-type topics [--entity-name orders] [--all]
"""

from __future__ import annotations

import argparse
import re

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.errors import UsageError

_ENTRY = re.compile(r"\s*(?P<key>[^=,\s]+)\s*=\s*(?:\[(?P<list>[^\]]*)\]|(?P<value>[^,]*))\s*(?:,|$)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "configs", help="users' SCRAM credentials and topic configs, as kafka-configs (--entity-type users|topics)",
        description="Add, delete and describe the SCRAM-SHA-256 / SCRAM-SHA-512 credentials deltalog serve "
        "checks (Kafka's kafka-configs.sh --entity-type users). Only the salt, iteration count, stored key and "
        "server key are kept in the store, never the password. Topic configs too, as kafka-configs.sh "
        "--entity-type topics: --alter --add-config 'k=v,k2=v2' --delete-config k3, --describe [--all].")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--alter", action="store_true", help="add or delete credentials")
    what.add_argument("--describe", action="store_true", help="list users' mechanisms and iteration counts")
    p.add_argument("--entity-type", choices=["users", "topics", "brokers", "clients", "ips"], default=None)
    p.add_argument("--entity-name", metavar="NAME", default=None)
    p.add_argument("--entity-default", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--user", metavar="NAME", default=None, help="the same as --entity-type users --entity-name NAME")
    p.add_argument("--topic", metavar="NAME", default=None, help="the same as --entity-type topics --entity-name NAME")
    p.add_argument("--all", action="store_true", help="with --describe of topics: every config, defaults included")
    p.add_argument("--add-config", metavar="CONFIGS", default=None,
                   help="'SCRAM-SHA-256=[iterations=8192,password=SECRET],SCRAM-SHA-512=[password=SECRET]'")
    p.add_argument("--delete-config", metavar="NAMES", default=None, help="'SCRAM-SHA-256,SCRAM-SHA-512'")
    output.add_output_option(p, text="Kafka's lines", json_help="one object per user: user, credentials")
    common.add_store_option(p)
    p.set_defaults(func=configs)


def parse_add_config(text: str) -> dict[str, dict[str, str]]:
    """``'SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]'`` -> mechanism -> options
    (Kafka's ``ConfigCommand.parseConfigsToBeAdded``: a value in square brackets may hold commas)."""
    out: dict[str, dict[str, str]] = {}
    pos = 0
    while pos < len(text):
        m = _ENTRY.match(text, pos)
        if m is None or m.end() == pos:
            raise UsageError(f"--add-config {text!r} is not KEY=[k=v,...],...: e.g. "
                             "'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'")
        if m["list"] is None:
            raise UsageError(f"--add-config: {m['key']} for a user takes [iterations=N,password=SECRET], e.g. "
                             f"'{m['key']}=[iterations=8192,password=alice-secret]'")
        options = {}
        for item in filter(None, (x.strip() for x in m["list"].split(","))):
            key, sep, value = item.partition("=")
            if not sep or key.strip() not in ("iterations", "password"):
                raise UsageError(f"--add-config: {item!r} in {m['key']}=[...] is not iterations=N or password=SECRET")
            options[key.strip()] = value
        out[m["key"]] = options
        pos = m.end()
    return out


def parse_topic_configs(text: str) -> dict[str, str]:
    """``'cleanup.policy=compact,min.cleanable.dirty.ratio=0.1'`` -> key -> value (a value in square brackets may
    hold commas, as Kafka's ``ConfigCommand.parseConfigsToBeAdded`` reads it)."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _ENTRY.match(text, pos)
        if m is None or m.end() == pos:
            raise UsageError(f"--add-config {text!r} is not KEY=VALUE,...: e.g. 'cleanup.policy=compact,"
                             "min.cleanable.dirty.ratio=0.1'")
        out[m["key"]] = m["list"] if m["list"] is not None else m["value"].strip()
        pos = m.end()
    return out


def topic_configs(args: argparse.Namespace) -> int:
    """``--entity-type topics``: describe or alter topic configs, as ``kafka-configs.sh`` does."""
    from deltalog.admin import default_values
    from deltalog.config import TopicConfig

    if args.topic is not None and (args.entity_type not in (None, "topics") or args.entity_name is not None):
        raise UsageError("--topic NAME is --entity-type topics --entity-name NAME: give one form")
    topic = args.topic or args.entity_name
    store = common.open_store(args)
    if args.describe:
        if args.add_config or args.delete_config:
            raise UsageError("--add-config and --delete-config go with --alter, not --describe")
        for name in [topic] if topic is not None else store.list_topics():
            config = store.topic_config(name)
            defaults = TopicConfig().to_properties()
            shown = {k: v for k, v in config.to_properties().items() if args.all or defaults.get(k) != v}
            if output.wants_json(args):
                output.emit({"topic": name, "configs": shown})
                continue
            print(f"{'All' if args.all else 'Dynamic'} configs for topic {name} are:")
            for key, value in shown.items():
                source = "DYNAMIC_TOPIC_CONFIG" if defaults.get(key) != value else "DEFAULT_CONFIG"
                print(f"  {key}={value} sensitive=false synonyms={{{source}:{key}={value}}}")
        return 0
    if args.all:
        raise UsageError("--all goes with --describe")
    if topic is None:
        raise UsageError("--alter needs --entity-name NAME (or --topic NAME)")
    if not args.add_config and not args.delete_config:
        raise UsageError("--alter needs --add-config or --delete-config")
    added = parse_topic_configs(args.add_config or "")
    deleted = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    both = sorted(set(added) & set(deleted))
    if both:
        raise UsageError(f"{both[0]} is both added and deleted; give one")
    for key in [*added, *deleted]:
        TopicConfig.key(key)  # an unknown key is an error naming the known ones
    after = store.alter_topic_config(topic, {**added, **default_values(deleted)})
    if output.wants_json(args):
        output.emit({"topic": topic, "altered": True, "config": after.to_properties()})
    else:
        print(f"Completed updating config for topic {topic}.")
    return 0


def _user(args: argparse.Namespace) -> str | None:
    if args.user is not None:
        if args.entity_type not in (None, "users") or args.entity_name is not None:
            raise UsageError("--user NAME is --entity-type users --entity-name NAME: give one form")
        return args.user
    if args.entity_type != "users":
        raise UsageError(f"--entity-type {args.entity_type or '(none)'}: deltalog configs handles users' SCRAM "
                         "credentials only (--entity-type users); there are no brokers, clients quotas or ips")
    return args.entity_name


def configs(args: argparse.Namespace) -> int:
    from deltalog.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion, scram_mechanism

    if args.topic is not None or args.entity_type == "topics":
        return topic_configs(args)
    if args.all:
        raise UsageError("--all goes with --describe --entity-type topics")
    user = _user(args)
    store = common.open_store(args, create=args.alter)
    admin = store.admin()
    if args.describe:
        if args.add_config or args.delete_config:
            raise UsageError("--add-config and --delete-config go with --alter, not --describe")
        if user is None:
            found = admin.describe_user_scram_credentials().result()
        else:
            found = {user: admin.describe_user_scram_credentials([user])[user].result()}
        for name, description in found.items():
            infos = description.scram_credential_infos
            if output.wants_json(args):
                output.emit({"user": name, "credentials": [{"mechanism": i.mechanism, "iterations": i.iterations}
                                                           for i in infos]})
            else:
                shown = ", ".join(f"{i.mechanism}=iterations={i.iterations}" for i in infos)
                print(f"SCRAM credential configs for user-principal '{name}' are {shown}")
        return 0
    if user is None:
        raise UsageError("--alter needs --entity-name NAME (or --user NAME)")
    if not args.add_config and not args.delete_config:
        raise UsageError("--alter needs --add-config or --delete-config")
    alterations: list[object] = []
    for mechanism, options in parse_add_config(args.add_config or "").items():
        if "password" not in options:
            raise UsageError(f"--add-config {mechanism}=[...] needs password=SECRET")
        iterations = options.get("iterations", "4096")
        if not iterations.strip().isdigit():
            raise UsageError(f"--add-config {mechanism}: iterations={iterations!r} is not a whole number")
        alterations.append(UserScramCredentialUpsertion(user, scram_mechanism(mechanism), options["password"],
                                                        iterations=int(iterations)))
    for name in filter(None, (x.strip() for x in (args.delete_config or "").split(","))):
        alterations.append(UserScramCredentialDeletion(user, scram_mechanism(name)))
    admin.alter_user_scram_credentials(alterations)[user].result()
    if output.wants_json(args):
        output.emit({"user": user, "altered": True})
    else:
        print(f"Completed updating config for user {user}.")
    return 0
