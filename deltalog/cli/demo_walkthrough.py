"""The fruit-prices walkthrough (log compaction, step by step; docs/walkthrough.md), replayed on a real store.

``deltalog demo`` creates a compacted ``fruit-prices`` topic in a fresh demo store and appends the
walkthrough's events with a :class:`~deltalog.clock.ManualClock`, so "seven days pass" takes no time:

====== ======= ========= =====================================================
offset key     value     what the seed says
====== ======= ========= =====================================================
0      grape   2.69      appended to the open segment 000
1      lime    0.49
2      grape   (null)    a tombstone: grape is deleted
3      lime    1.59      lime's new price; offset 1 is still readable
         (seven days pass: segment.ms expires, 000 closes on the next append)
4      lime    1.99      appended to the new open segment 004
====== ======= ========= =====================================================

It prints the log and the partition state (segment 000 closed and dirty, segment 004 active, dirty ratio
1.0), runs a real cleaning pass (a Spark job on the embedded local session) and prints the log after it:
offsets 2 (the grape tombstone, now with a delete horizon), 3 and 4, dirty ratio 0.0. Then the seed's
second week: kiwi and guava prices go into 004, a week later 004 closes and 008 opens with guava, and
the second clean leaves offsets 4, 6, 7 and 8 (the grape tombstone's horizon has passed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from deltalog.cli.report import format_table, format_timestamp, partition_lines
from deltalog.clock import ManualClock
from deltalog.describe import TopicDescription
from deltalog.errors import DemoStoreError
from deltalog.log.record import Record
from deltalog.storage import Storage
from deltalog.store import Store

DEFAULT_DEMO_STORE = "./demo-store"
TOPIC = "fruit-prices"
#: A file that marks a directory as a demo store, the only kind of directory the demo will wipe.
MARKER = ".deltalog-demo-store"
#: The walkthrough starts at a fixed time, so every run prints the same timestamps.
START_MS = int(datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE_MS = 60_000
SEVEN_DAYS_MS = 7 * 24 * 3600 * 1000

#: The events before and after the seven days, as (key, value); value None is a tombstone.
FIRST_WEEK: tuple[tuple[bytes, bytes | None], ...] = (
    (b"grape", b"2.69"),
    (b"lime", b"0.49"),
    (b"grape", None),
    (b"lime", b"1.59"),
)
SECOND_WEEK: tuple[tuple[bytes, bytes | None], ...] = ((b"lime", b"1.99"),)
#: The seed's later events: into segment 004, then (a week later) guava opens segment 008.
THIRD_WEEK: tuple[tuple[bytes, bytes | None], ...] = ((b"kiwi", b"0.35"), (b"guava", b"1.20"), (b"kiwi", b"0.40"))
FOURTH_WEEK: tuple[tuple[bytes, bytes | None], ...] = ((b"guava", b"1.25"),)


@dataclass(frozen=True)
class DemoResult:
    """What the demo did, as data: the store, the offsets it got back, the state before and after each clean."""

    store: Store
    offsets: tuple[int, ...]
    before: TopicDescription
    after: TopicDescription
    final: TopicDescription


def fresh_demo_store(path: str | os.PathLike[str], clock: ManualClock, *,
                     storage_options: Mapping[str, str] | None = None) -> Store:
    """Wipe ``path`` (a local path or a URI; only if it is empty, missing, or an earlier demo store) and open
    a store there."""
    storage = Storage(path, storage_options)
    if storage.local and os.path.exists(storage.root) and not os.path.isdir(storage.root):
        raise DemoStoreError(f"{storage.root} exists and is not a directory; give the demo another --store")
    marker = storage.location(MARKER)
    if not storage.exists(marker):
        if storage.list_files(storage.root):
            raise DemoStoreError(
                f"{storage.root} is not empty and is not a demo store (no {MARKER} file); "
                "the demo wipes its store first, so give it an empty or new location with --store"
            )
    storage.delete_tree(storage.root)
    storage.write_bytes(marker, b"Created by 'deltalog demo', which wipes this store every time it runs.\n")
    return Store(storage.root, storage_options=storage_options, clock=clock)


def produce_walkthrough(store: Store, clock: ManualClock,
                        weeks: tuple[tuple[tuple[bytes, bytes | None], ...], ...] = (FIRST_WEEK, SECOND_WEEK)) -> list[int]:
    """Append the events of each week one at a time (one batch each, as a producer would), a minute
    apart; seven days pass between weeks, so segment.ms rolls the active segment on the next append."""
    offsets = []
    for i, week in enumerate(weeks):
        if i:
            clock.advance(SEVEN_DAYS_MS)  # segment.ms (7 days) has passed since the segment opened
        for key, value in week:
            offsets += store.append(TOPIC, 0, [Record(key=key, value=value)])
            clock.advance(MINUTE_MS)
    return offsets


def log_lines(store: Store, partition: int = 0) -> str:
    """The partition's records, one row each, with the segment that holds them."""
    segments = store.describe(TOPIC)[partition].segments
    rows = []
    for r in store.read(TOPIC, partition, from_offset="earliest"):
        base = next(s.base_offset for s in segments if s.base_offset <= r.offset < s.end_offset)  # type: ignore[operator]
        value = "(tombstone)" if r.value is None else r.value.decode("utf-8", "replace")
        key = r.key.decode("utf-8", "replace") if r.key is not None else "-"
        rows.append((r.offset, key, value, format_timestamp(r.timestamp_ms), base))
    return format_table(("offset", "key", "value", "timestamp (UTC)", "segment"), rows, indent="  ")


def show(store: Store, title: str, out: Callable[[str], object]) -> TopicDescription:
    """Print the log and the partition state under ``title``; return the description printed."""
    description = store.describe(TOPIC)
    out(f"== {title} ==")
    out("")
    out(f"The log of {TOPIC}-0:")
    out(log_lines(store))
    out("")
    out("The partition:")
    out(partition_lines(description[0]))
    out("")
    return description


def clean_and_show_after(store: Store, out: Callable[[str], object], title: str = "after cleaning") -> TopicDescription:
    """Run the cleaner until nothing is eligible (a Spark job per pass), print each pass's figures as
    Kafka's cleaner log line does, then the log after it."""
    out("Running the log cleaner (a Spark job on the embedded local session)...")
    for result in store.clean(TOPIC):
        out(result.summary())
    out("")
    return show(store, title, out)


def run_demo(store_path: str | os.PathLike[str] = DEFAULT_DEMO_STORE, out: Callable[[str], object] = print,
             *, clock: ManualClock | None = None, storage_options: Mapping[str, str] | None = None) -> DemoResult:
    """Replay the fruit-prices walkthrough in a fresh store at ``store_path`` (a path or a URI) and print what
    happened."""
    clock = clock or ManualClock(START_MS)
    store = fresh_demo_store(store_path, clock, storage_options=storage_options)
    store.create_topic(TOPIC, partitions=1, config={"cleanup.policy": "compact"})
    out(f"Created topic {TOPIC} (cleanup.policy=compact, 1 partition) in {store.root}")
    out("Appending the walkthrough: grape 2.69, lime 0.49, grape tombstone, lime 1.59; "
        "seven days pass; lime 1.99.")
    out("")
    offsets = produce_walkthrough(store, clock)
    before = show(store, "before cleaning", out)
    after = clean_and_show_after(store, out, "after the first clean")
    out("The walkthrough continues: kiwi and guava prices go into segment 004; a week later 004 closes and guava "
        "opens 008. More than delete.retention.ms (24 h) has passed since the grape tombstone was stamped.")
    out("")
    offsets += produce_walkthrough(store, clock, (THIRD_WEEK, FOURTH_WEEK))
    show(store, "before the second clean", out)
    final = clean_and_show_after(store, out, "after the second clean")
    return DemoResult(store=store, offsets=tuple(offsets), before=before, after=after, final=final)
