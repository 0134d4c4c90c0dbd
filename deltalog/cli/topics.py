"""``deltalog topics create|list|describe|alter|delete`` (Kafka's kafka-topics / kafka-configs).

``create``, ``list``, ``describe`` and ``alter`` are also top-level commands, for short. Kafka's flags work as its
tools take them: the topic as ``--topic T`` or as the positional name; ``create --if-not-exists``; ``delete
--if-exists`` and ``alter --if-exists``; ``alter --partitions N`` (kafka-topics: only more partitions, and keyed
records sent afterwards may go to other partitions than before, as in Kafka); ``alter --delete-config KEY``
(kafka-configs: the key returns to Kafka's default); ``--replication-factor`` on ``create`` is accepted and means
nothing here (every Delta commit is as durable as the store; there are no replicas).
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.admin import default_values
from deltalog.cli import output
from deltalog.cli.exit_codes import EXIT_BROKEN_DATA
from deltalog.cli.report import config_lines, describe_lines
from deltalog.config import TopicConfig
from deltalog.errors import TopicExistsError, UnknownTopicOrPartitionError
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


def _topic_argument(p: argparse.ArgumentParser, *, optional: bool = False, help_text: str | None = None) -> None:
    """The topic as a positional name or as kafka-topics' ``--topic T``."""
    p.add_argument("topic", metavar="TOPIC", nargs="?", help=help_text)
    p.add_argument("--topic", dest="topic_flag", metavar="TOPIC", help="the topic, as kafka-topics takes it")
    p.set_defaults(topic_optional=optional)


def topic_of(args: argparse.Namespace) -> str | None:
    """The topic given positionally or with ``--topic`` (one of them; both only if they agree)."""
    given, flag = args.topic, getattr(args, "topic_flag", None)
    if given is not None and flag is not None and given != flag:
        raise common.UsageError(f"two topics given: {given!r} and --topic {flag!r}; give one")
    topic = given if given is not None else flag
    if topic is None and not getattr(args, "topic_optional", False):
        raise common.UsageError("give the topic: TOPIC or --topic TOPIC")
    return topic


def _topic_config_option(p: argparse.ArgumentParser, *, required: bool) -> None:
    keys = ", ".join(k.name for k in TopicConfig.KEYS)
    p.add_argument("--config", "--add-config", dest="topic_config", metavar="KEY=VALUE", type=common.key_value,
                   action="append", default=[], required=required,
                   help=f"a topic config with its Kafka name (repeatable); keys: {keys}")


def _add_create(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("create", help=help_text or "create a topic",
                       description="Create a topic of empty partitions; configs not given take Kafka's defaults.")
    _topic_argument(p, help_text="legal characters [a-zA-Z0-9._-], at most 249")
    p.add_argument("-p", "--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="if the topic exists already, do nothing (and succeed), as kafka-topics --if-not-exists")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="accepted for Kafka's command lines and ignored: a partition is a Delta table, as durable as "
                   "the store that holds it; there are no replicas")
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
    _topic_argument(p, optional=True, help_text="the topic (default: every topic)")
    output.add_output_option(p, text="configs, offsets and segments", json_help="one object per topic: topic, "
                             "config, partitions (offsets, sections, dirty ratio, segments)")
    common.add_store_option(p)
    p.set_defaults(func=describe)


def _add_alter(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("alter", help=help_text or "change topic configs or add partitions",
                       description="Set some topic configs (--config), return some to Kafka's defaults "
                       "(--delete-config), the others keep their values (Kafka's incrementalAlterConfigs SET and "
                       "DELETE); the change is validated before any partition is touched. --partitions N raises the "
                       "partition count to N (only more, as Kafka's; keyed records sent afterwards may go to other "
                       "partitions than before).")
    _topic_argument(p)
    _topic_config_option(p, required=False)
    p.add_argument("--delete-config", dest="delete_config", metavar="KEY", action="append", default=[],
                   help="return a topic config to Kafka's default (repeatable), as kafka-configs --delete-config")
    p.add_argument("--partitions", dest="new_partitions", type=int, metavar="N",
                   help="raise the partition count to N (kafka-topics --alter --partitions)")
    p.add_argument("--if-exists", action="store_true", help="if the topic does not exist, do nothing (and succeed)")
    output.add_output_option(p, text="what changed and the configs",
                             json_help="one object: topic, changed (config names), config")
    common.add_store_option(p)
    p.set_defaults(func=alter)


def _add_delete(sub: argparse._SubParsersAction, help_text: str | None) -> None:
    p = sub.add_parser("delete", help=help_text or "delete a topic and all its data",
                       description="Delete a topic and all its data. Irreversible, so --yes is required.")
    _topic_argument(p)
    p.add_argument("--yes", action="store_true", help="really delete")
    p.add_argument("--if-exists", action="store_true", help="if the topic does not exist, do nothing (and succeed)")
    output.add_output_option(p, text="a line saying so", json_help="one object: topic, deleted")
    common.add_store_option(p)
    p.set_defaults(func=delete)


def create(args: argparse.Namespace) -> int:
    # Validated before the store is opened: opening creates a new store's directory, which a refused command
    # must not leave behind.
    args.topic = topic_of(args)
    validate_topic_name(args.topic)
    validate_partition_count(args.topic, args.partitions)
    if args.replication_factor is not None and args.replication_factor < 1 and args.replication_factor != -1:
        raise common.UsageError(f"--replication-factor must be >= 1 (or -1, the default), not "
                                f"{args.replication_factor}")
    TopicConfig.from_properties(dict(args.topic_config))
    store = common.open_store(args, create=True)
    try:
        config = store.create_topic(args.topic, partitions=args.partitions, config=dict(args.topic_config))
    except TopicExistsError:
        if not args.if_not_exists:
            raise
        if output.wants_json(args):
            output.emit({"topic": args.topic, "created": False, "partitions": len(store.partitions(args.topic))})
        else:
            print(f"Topic {args.topic} already exists in {store.root}; nothing done (--if-not-exists)")
        return 0
    if output.wants_json(args):
        output.emit({"topic": args.topic, "partitions": args.partitions, "config": config.to_properties()})
        return 0
    print(f"Created topic {args.topic} with {args.partitions} partition(s) in {store.root}")
    print(config_lines(config))
    return 0


def list_(args: argparse.Namespace) -> int:
    """Every topic, one whose marker is damaged included with its damage named (exit code 3, broken data: the
    marker needs a look, as ``deltalog doctor`` says), never left out."""
    store = common.open_store(args)
    names = store.list_topics()
    damaged = store.damaged_topics()
    if args.exclude_internal:
        names = [t for t in names if not is_internal_topic(t)]
    if output.wants_json(args):
        for t in names:
            if t in damaged:
                output.emit({"topic": t, "partitions": None, "damaged": str(damaged[t]),
                             "location": damaged[t].location})
            else:
                output.emit({"topic": t, "partitions": len(store.partitions(t))})
    else:
        for t in names:
            print(t if t not in damaged else f"{t}  (DAMAGED: {damaged[t]})")
    return EXIT_BROKEN_DATA if any(t in damaged for t in names) else 0


def describe(args: argparse.Namespace) -> int:
    args.topic = topic_of(args)
    store = common.open_store(args)
    names = [args.topic] if args.topic is not None else store.list_topics()  # '' is a bad name, not "every topic"
    descriptions = store.describe_topics(names)
    if output.wants_json(args):
        for d in descriptions:
            output.emit(d.as_dict())
    elif not descriptions:
        print(f"No topics in {store.root}")
    else:
        print("\n\n".join(describe_lines(d) for d in descriptions))
    return 0


def alter(args: argparse.Namespace) -> int:
    args.topic = topic_of(args)
    if not (args.topic_config or args.delete_config or args.new_partitions is not None):
        raise common.UsageError("give what to change: --config KEY=VALUE, --delete-config KEY or --partitions N")
    both = sorted({k for k, _ in args.topic_config} & set(args.delete_config))
    if both:
        raise common.UsageError(f"{both[0]} is both set (--config) and deleted (--delete-config); give one")
    for key in args.delete_config:
        TopicConfig.key(key)  # an unknown key is an error naming the known ones
    store = common.open_store(args)
    if args.if_exists and not store.topic_exists(args.topic):
        print(f"Topic {args.topic} does not exist in {store.root}; nothing done (--if-exists)")
        return 0
    before_partitions = len(store.partitions(args.topic))
    before = store.topic_config(args.topic)
    change = {**dict(args.topic_config), **default_values(args.delete_config)}
    after = store.alter_topic_config(args.topic, change) if change else before
    if args.new_partitions is not None:
        if is_internal_topic(args.topic):
            raise common.UsageError(f"the partition count of internal topic {args.topic} is deltalog's")
        store.log_manager.create_partitions(args.topic, args.new_partitions)
    changed = [k.name for k in TopicConfig.KEYS if getattr(before, k.attr) != getattr(after, k.attr)]
    partitions = len(store.partitions(args.topic))
    if output.wants_json(args):
        output.emit({"topic": args.topic, "changed": changed, "partitions": partitions, "config": after.to_properties()})
        return 0
    print(f"Altered topic {args.topic}: " + (", ".join(changed) + " changed" if changed else "no value changed"))
    if partitions != before_partitions:
        print(f"Partitions: {before_partitions} -> {partitions} (keyed records sent from now on may go to other "
              "partitions than before)")
    print(config_lines(after))
    return 0


def delete(args: argparse.Namespace) -> int:
    args.topic = topic_of(args)
    if not args.yes:
        raise common.UsageError(f"deleting topic {args.topic!r} removes all its data; add --yes to confirm")
    store = common.open_store(args)
    try:
        store.delete_topic(args.topic)
    except UnknownTopicOrPartitionError:
        if not args.if_exists:
            raise
        print(f"Topic {args.topic} does not exist in {store.root}; nothing done (--if-exists)")
        return 0
    if output.wants_json(args):
        output.emit({"topic": args.topic, "deleted": True})
    else:
        print(f"Deleted topic {args.topic}")
    return 0
