"""Plain-text views of a topic's partitions and configs, and the generated config tables of ``docs/configs.md``.

The CLI (``deltalog topics describe``) and the demo print the same view of a partition, so it lives
here, beside the data it renders (:class:`~deltalog.describe.TopicDescription`), not in either of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from deltalog.config import ConfigKey, StoreConfig, TopicConfig
from deltalog.describe import PartitionState, TopicDescription
from deltalog.state.lag import StateLag
from deltalog.text import format_bytes, format_table, format_timestamp


def config_lines(config: TopicConfig) -> str:
    """Every topic config, with ``(default)`` beside the ones nobody set."""
    rows = []
    for key in TopicConfig.KEYS:
        value = getattr(config, key.attr)
        rows.append((key.name, key.render(value), "default" if value == key.default else "set"))
    return format_table(("config", "value", "source"), rows, indent="  ")


def partition_lines(state: PartitionState) -> str:
    """Offsets, cleaning figures and the segment table of one partition."""
    head = [
        f"{state.topic}-{state.partition} (Delta version {state.version})",
        f"  log start offset {state.log_start_offset}, log end offset {state.log_end_offset}, "
        f"{state.num_records} records in {format_bytes(state.size_bytes)}",
        f"  clean [{state.log_start_offset}, {state.first_dirty_offset}), "
        f"cleanable [{state.first_dirty_offset}, {state.first_uncleanable_offset}), "
        f"active segment from {state.active_segment_base_offset}",
        f"  clean {format_bytes(state.clean_bytes)}, dirty {format_bytes(state.dirty_bytes)}, "
        f"dirty ratio {state.dirty_ratio:.2f}, eligible for cleaning: {'yes' if state.eligible_for_cleaning else 'no'}",
    ]
    if state.duplicates is not None:
        head.append(f"  OFFSETS SERVED TWICE: {state.duplicates}")
    if state.uncleanable_reason is not None:
        head.append(f"  UNCLEANABLE (a pass failed: {state.uncleanable_reason[:200]}); "
                    f"'deltalog cleaner reset-uncleanable {state.topic} {state.partition}' clears it")
    rows = [
        (s.base_offset, s.end_offset, s.num_records, len(s.files), s.size_bytes, s.tombstones,
         format_timestamp(s.largest_timestamp_ms), "active" if s.is_active else "closed")
        for s in state.segments
    ]
    table = format_table(
        ("segment", "end", "records", "files", "bytes", "tombstones", "newest record (UTC)", "state"), rows,
        indent="  ",
    )
    return "\n".join(head) + "\n" + table


def describe_lines(description: TopicDescription, *, with_config: bool = True) -> str:
    """The whole ``describe`` view: configs, then each partition."""
    parts = [f"Topic {description.topic}: {len(description)} partition(s), "
             f"cleanup.policy={','.join(description.config.cleanup_policy)}"]
    if with_config:
        parts.append(config_lines(description.config))
    parts.extend(partition_lines(p) for p in description)
    if description.state_table is not None:
        parts.append(state_table_lines(description.state_table))
    return "\n\n".join(parts)


def state_table_lines(lag: StateLag) -> str:
    """The state table's freshness: per partition the offset applied and how far behind the log it is."""
    if not lag.exists:
        return "  State table: not made yet (deltalog state refresh, or the cleaner job's next cycle)"
    behind = (f"{lag.offsets_behind} offset(s) behind, at most {lag.time_behind_ms / 1000:.1f} s"
              if lag.offsets_behind else "up to date")
    lines = [f"  State table: version {lag.table_version}, {behind}{'; AHEAD of the log' if lag.ahead else ''}"]
    lines += [f"    partition {p.partition}: applied to offset {p.applied_offset}, last stable offset "
              f"{p.last_stable_offset} ({p.offsets_behind} behind)" for p in lag.partitions]
    return "\n".join(lines)


#: Config names that are Kafka's own (topic configs and broker cleaner settings), with Kafka's defaults.
KAFKA_CONFIG_NAMES = frozenset({
    "cleanup.policy", "segment.bytes", "segment.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "max.compaction.lag.ms", "delete.retention.ms", "retention.ms", "retention.bytes", "file.delete.delay.ms",
    "max.message.bytes", "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms", "producer.id.expiration.ms", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second",
    "offset.metadata.max.bytes", "offsets.retention.minutes", "offsets.retention.check.interval.ms",
    "transactional.id.expiration.ms", "transaction.remove.expired.transaction.cleanup.interval.ms",
    "background.threads",
})
#: Kafka's names whose deltalog default differs from Kafka's, with Kafka's default (their rows and
#: ``docs/consumer-groups.md`` / ``docs/history-and-time-travel.md`` say why).
KAFKA_NAMES_OTHER_DEFAULT = {"offsets.topic.num.partitions": "50", "offsets.topic.segment.bytes": "104857600",
                             "file.delete.delay.ms": "60000"}


def config_markdown(keys: Sequence[ConfigKey]) -> str:
    """A Markdown table of config keys (name, default, Kafka or not, what it does), generated from the key
    table so ``docs/configs.md`` cannot drift from the code (``tests/test_readme.py`` checks it)."""
    rows = ["| Key | Default | Kafka | What it does |", "| --- | --- | --- | --- |"]
    for k in keys:
        kafka = "same name and default" if k.name in KAFKA_CONFIG_NAMES else "deltalog only"
        if k.name in KAFKA_NAMES_OTHER_DEFAULT:
            kafka = f"same name, Kafka's default `{KAFKA_NAMES_OTHER_DEFAULT[k.name]}`"
        default = k.render(k.default)
        rows.append(f"| `{k.name}` | {f'`{default}`' if default else '(empty)'} | {kafka} | {k.doc} |")
    return "\n".join(rows)


#: Generated documentation blocks (``docs/configs.md``): ``<!-- BEGIN name -->`` ... ``<!-- END name -->`` and
#: what goes between them.
README_BLOCKS: dict[str, Callable[[], str]] = {
    "topic-configs": lambda: config_markdown(TopicConfig.KEYS),
    "store-configs": lambda: config_markdown(StoreConfig.KEYS),
}


def render_readme(text: str) -> str:
    """``text`` with every generated block brought up to date (``python -m deltalog.cli.report docs/configs.md``)."""
    for name, make in README_BLOCKS.items():
        begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


if __name__ == "__main__":
    import sys

    for path in sys.argv[1:] or ["docs/configs.md"]:
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = render_readme(old)
        if new != old:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"updated {path}")
