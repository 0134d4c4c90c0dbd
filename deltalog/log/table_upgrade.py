"""Bring a partition table made by an earlier deltalog up to this version's table properties and description.

What a partition table tells other Delta engines about itself grew over releases: deletion vectors, optimized
writes and auto-compaction off, ``deltalog.other_engines`` (:data:`deltalog.log.delta.ENGINE_PROPERTIES`), Delta's
retention properties kept in step with the topic's ``file.delete.delay.ms`` and ``producer.id.expiration.ms``
(:mod:`deltalog.log.delta_retention`), and the table description. A table created by this version has them all;
one created earlier gets them the first time a process of this version opens it (:meth:`PartitionLog.table
<deltalog.log.partition_log.PartitionLog.table>`), as Kafka's broker brings what an older broker left up to its own
format when it loads a log (``LogLoader`` rebuilds a missing or stale index an older broker left) rather than in
a migration step of its own:

- **cheap when current**: the check compares the properties and description of the snapshot just opened (no read
  of its own); a current table costs no request and no commit;
- **a deltalog commit**: the properties in one ``SET TBLPROPERTIES`` commit and the description in one of its own
  (delta-rs sets a description in a commit of its own), both with ``deltalog.operation = upgrade_table`` and a
  commit id, so :func:`deltalog.log.foreign_commits.classify` takes them for deltalog's and ``store.history`` lists
  them as kind ``upgrade_table``;
- **idempotent, and safe with two processes at once**: only what differs is written, and a commit that loses a race
  (another process upgraded first, or any other commit landed) is planned again from the refreshed table, where it
  usually finds nothing left to do;
- **never in the way of a read**: a store the process may only read (read-only credentials, a full disk, a store
  that fails) leaves the table as it was, logs why once, and the read goes on; the next process that can write
  upgrades it.

Only deltalog's own fixed properties are set to this version's values. Delta's retention properties are added
when missing and otherwise left alone: another engine may have set them (a tolerated ``SET TBLPROPERTIES``, read
back as the effective value). The topic's own configs (``deltalog.topic.*``) are not touched: a config a table does
not name takes the default, as Kafka's topic configs do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from deltalog.errors import CommitConflictError
from deltalog.log import delta, delta_retention

log = logging.getLogger(__name__)

#: The ``deltalog.operation`` of an upgrade's commits (a kind of :mod:`deltalog.log.history`).
OPERATION = "upgrade_table"
#: Delta properties a table made before they existed gets, never overwritten when present.
ADDED_WHEN_MISSING = (delta.SET_TXN_RETENTION, delta_retention.DELETED_FILE_RETENTION,
                      delta_retention.LOG_RETENTION)
#: Lost races before the upgrade is left to the next open (each loser refreshes and usually finds it done).
ATTEMPTS = 3

_warned: set[str] = set()  # stores whose refused upgrade was logged at WARNING (once per store and process)


def stale_properties(configuration: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str]:
    """The properties to set on a table whose properties are ``configuration`` so that it says what a table this
    version creates says; ``wanted`` is what this version writes for the table's topic config (its
    ``config_to_table_properties``). Empty: the table is current. Pure."""
    out = {k: v for k, v in delta.ENGINE_PROPERTIES.items() if configuration.get(k) != v}
    out.update({k: wanted[k] for k in ADDED_WHEN_MISSING if k in wanted and k not in configuration})
    return out


def stale_description(current: str | None, topic: str, partition: int) -> str | None:
    """The description to set (None: the table's is this version's)."""
    wanted = delta.table_description(topic, partition)
    return None if current == wanted else wanted


def is_current(configuration: Mapping[str, str], description: str | None, topic: str, partition: int) -> bool:
    """Whether the table already says all this version says (the check every first open makes; a dict lookup or
    so per property)."""
    return (all(configuration.get(k) == v for k, v in delta.ENGINE_PROPERTIES.items())
            and all(k in configuration for k in ADDED_WHEN_MISSING)
            and stale_description(description, topic, partition) is None)


def is_partition(configuration: Mapping[str, str]) -> bool:
    """Whether the table is a deltalog partition at all (nothing is upgraded on any other table)."""
    return configuration.get(delta.PROP_TOPIC) is not None


def bring_up_to_date(dt: Any, uri: str, topic: str, partition: int, wanted: Mapping[str, str]) -> int:
    """Upgrade the partition table ``dt`` (a :class:`deltalake.DeltaTable` at its latest version, checked for
    other engines' commits) in place; returns how many commits it made (0 when current, or when the store refused
    them). ``wanted``: see :func:`stale_properties`. Never raises for the store: see the module's docstring."""
    made = 0
    for _ in range(ATTEMPTS):
        meta = dt.metadata()
        configuration = meta.configuration
        if not is_partition(configuration):
            return made
        props = stale_properties(configuration, wanted)
        description = stale_description(meta.description, topic, partition)
        if not props and description is None:
            return made
        try:
            if props:
                delta.alter_properties(dt, props, operation=OPERATION)
                made += 1
            if description is not None:
                if props:
                    dt.update_incremental()
                delta.set_description(dt, description, operation=OPERATION)
                made += 1
        except CommitConflictError:
            pass  # another process (or any commit) won: look again at the refreshed table
        except Exception as e:  # noqa: BLE001 - best effort: reads must go on where the store refuses writes
            _refused(uri, e)
            return made
        try:
            dt.update_incremental()
        except Exception as e:  # noqa: BLE001 - the next operation's refresh reports the store's failure
            _refused(uri, e)
            return made
    return made


def _refused(uri: str, error: BaseException) -> None:
    root = uri.rsplit("/topics/", 1)[0]
    level = logging.DEBUG if root in _warned else logging.WARNING
    _warned.add(root)
    log.log(level, "could not bring the partition table %s up to this deltalog's table properties and description "
            "(%s: %s); it keeps working as it is, and a process that can write to the store upgrades it",
            uri, type(error).__name__, error)
