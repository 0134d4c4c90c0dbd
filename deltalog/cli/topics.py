"""``deltalog topics create|list|describe|alter|delete`` (Kafka's kafka-topics / kafka-configs).

``create``, ``list``, ``describe`` and ``alter`` are also top-level commands, for short.
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.cli.report import config_lines, describe_lines
from deltalog.config import TopicConfig
from deltalog.log.log_manager import is_internal_topic, validate_partition_count, validate_topic_name


def register(subparsers: argparse._SubParsersAction) -> None:
    topics = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Manage topics: each partition of a topic is one Delta table under STORE/topics/TOPIC/.",
    )
    sub = topics.add_subparsers(dest="topics_command", metavar="COMMAND", required=True)
    for add in (_add_create, _add_list, _add_describe, _add_alter, _add_delete):
        add(sub, None)
    for add, name in ((_add_create, "create"), (_add_list, "list"), (_add_describe, "describe"),
                      (_add_alter, "alter")):
        add(subparsers, f"same as 'topics {name}'")


def _topic_config_option(p: argparse.ArgumentParser, *, required: bool) -> None:
    keys = ", ".join(k.name for k in TopicConfig.KEYS)
    p.add_argument("--config", "--add-config", dest="topic_config", metavar="KEY=VALUE", type=common.key_value,
                   action="append", default=[], required=required,
                   help=f"a topic config with its Kafka name (repeatable); keys: {keys}")


def _add_create(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("create", help=help_text or "create a topic",
                       description="Create a topic of empty partitions; configs not given take Kafka's defaults.")
    p.add_argument("topic", metavar="TOPIC", help="legal characters [a-zA-Z0-9._-], at most 249")
    p.add_argument("-p", "--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)")
    _topic_config_option(p, required=False)
    output.add_output_option(p, text="what was created and its configs",
                             json_help="one object: topic, partitions, config")
    common.add_store_option(p)
    p.set_defaults(func=create)


def _add_list(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("list", help=help_text or "list topics")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave out deltalog's internal topics (__consumer_offsets), as Kafka's kafka-topics does")
    output.add_output_option(p, text="one topic name per line", json_help="one object per topic: topic, partitions")
    common.add_store_option(p)
    p.set_defaults(func=list_)


def _add_describe(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("describe", help=help_text or "show configs, offsets, segments and dirty ratio",
                       description="Configs, then per partition: log start/end offsets, clean and cleanable "
                       "sections, dirty ratio, and the segments with their sizes. Reads only the Delta log.")
    p.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (default: every topic)")
    output.add_output_option(p, text="configs, offsets and segments", json_help="one object per topic: topic, "
                             "config, partitions (offsets, sections, dirty ratio, segments)")
    common.add_store_option(p)
    p.set_defaults(func=describe)


def _add_alter(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("alter", help=help_text or "change topic configs",
                       description="Set some topic configs; the others keep their values (Kafka's "
                       "incrementalAlterConfigs SET). The change is validated before any partition is touched.")
    p.add_argument("topic", metavar="TOPIC")
    _topic_config_option(p, required=True)
    output.add_output_option(p, text="what changed and the configs",
                             json_help="one object: topic, changed (config names), config")
    common.add_store_option(p)
    p.set_defaults(func=alter)


def _add_delete(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("delete", help=help_text or "delete a topic and all its data",
                       description="Delete a topic and all its data. Irreversible, so --yes is required.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--yes", action="store_true", help="really delete")
    output.add_output_option(p, text="a line saying so", json_help="one object: topic, deleted")
    common.add_store_option(p)
    p.set_defaults(func=delete)


def create(args: argparse.Namespace) -> int:
    # Validated before the store is opened: opening creates a new store's directory, which a refused command
    # must not leave behind.
    validate_topic_name(args.topic)
    validate_partition_count(args.topic, args.partitions)
    TopicConfig.from_properties(dict(args.topic_config))
    store = common.open_store(args, create=True)
    config = store.create_topic(args.topic, partitions=args.partitions, config=dict(args.topic_config))
    if output.wants_json(args):
        output.emit({"topic": args.topic, "partitions": args.partitions, "config": config.to_properties()})
        return 0
    print(f"Created topic {args.topic} with {args.partitions} partition(s) in {store.root}")
    print(config_lines(config))
    return 0


def list_(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    names = store.list_topics()
    if args.exclude_internal:
        names = [t for t in names if not is_internal_topic(t)]
    if output.wants_json(args):
        for t in names:
            output.emit({"topic": t, "partitions": len(store.partitions(t))})
    else:
        for t in names:
            print(t)
    return 0


def describe(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    names = [args.topic] if args.topic is not None else store.list_topics()  # '' is a bad name, not "every topic"
    descriptions = [store.describe(t) for t in names]
    if output.wants_json(args):
        for d in descriptions:
            output.emit(d.as_dict())
    elif not descriptions:
        print(f"No topics in {store.root}")
    else:
        print("\n\n".join(describe_lines(d) for d in descriptions))
    return 0


def alter(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    before = store.topic_config(args.topic)
    after = store.alter_topic_config(args.topic, dict(args.topic_config))
    changed = [k.name for k in TopicConfig.KEYS if getattr(before, k.attr) != getattr(after, k.attr)]
    if output.wants_json(args):
        output.emit({"topic": args.topic, "changed": changed, "config": after.to_properties()})
        return 0
    print(f"Altered topic {args.topic}: " + (", ".join(changed) + " changed" if changed else "no value changed"))
    print(config_lines(after))
    return 0


def delete(args: argparse.Namespace) -> int:
    if not args.yes:
        raise common.UsageError(f"deleting topic {args.topic!r} removes all its data; add --yes to confirm")
    store = common.open_store(args)
    store.delete_topic(args.topic)
    if output.wants_json(args):
        output.emit({"topic": args.topic, "deleted": True})
    else:
        print(f"Deleted topic {args.topic}")
    return 0
