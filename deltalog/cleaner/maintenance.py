"""The store's scheduled maintenance around the cleaning loop: retention, VACUUM and the coordinators' timers.

None of this is the log cleaner's work in Kafka, and none of it is in the cleaning loop here. The broker's scheduler
runs it: the ``LogManager``'s ``kafka-log-retention`` task (``cleanupLogs``: ``deleteOldSegments`` of every log,
every ``log.retention.check.interval.ms``); the ``delete-file`` task ``LocalLog.deleteSegmentFiles`` schedules
``file.delete.delay.ms`` after a segment is replaced; the ``GroupMetadataManager``'s
``delete-expired-group-metadata`` (``cleanupGroupMetadata``, every ``offsets.retention.check.interval.ms``); the
``TransactionCoordinator``'s ``transaction-abort`` (``abortTimedOutTransactions``) and the
``TransactionStateManager``'s ``transactionalId-expiration`` (``removeExpiredTransactionalIds``). deltalog has no
broker process, so one object, :class:`StoreMaintenance`, owns these tasks and their timers, and whoever runs the
store's cycle (:meth:`deltalog.cleaner.log_cleaner.LogCleaner.run_cycle`, the scheduled job) calls it before and
after the cleaning loop. Each task on a partition holds the partition's lease (:mod:`deltalog.log.lease`).

A timer's failure (a deltalog error) is logged and the step tried again next time: as in Kafka, where a
scheduled task that throws is logged and runs again at its next tick, it never stops the cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from deltalog.config import StoreConfig
from deltalog.coordinator.group.offsets_topic import OffsetsTopic
from deltalog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from deltalog.errors import DeltalogError
from deltalog.log.log_manager import LogManager
from deltalog.log.retention import RetentionResult, apply_retention
from deltalog.log.vacuum import VacuumResult, vacuum_staged, vacuum_store, vacuum_temp_files

T = TypeVar("T")

log = logging.getLogger(__name__)


class StoreMaintenance:
    """The store's scheduled tasks other than cleaning, and when each of the coordinators' timers last ran.

    It lives as long as its owner (a :class:`~deltalog.cleaner.log_cleaner.LogCleaner`, so a job's run): a timer
    runs at its first look, then once every interval of that run.
    """

    def __init__(self, logs: LogManager, config: StoreConfig, *, offsets: OffsetsTopic | None = None,
                 vacuum: bool = True) -> None:
        self.logs = logs
        self.config = config
        #: The store's committed offsets, whose expiry :meth:`expire_offsets` runs.
        self.offsets = offsets if offsets is not None else OffsetsTopic(logs, config)
        #: Whether :meth:`vacuum` removes anything (the job's ``vacuum`` setting).
        self.vacuum_enabled = vacuum
        self._timers_ran_ms: dict[str, int] = {}

    @property
    def clock(self):  # noqa: ANN201 - the log manager's Clock
        return self.logs.clock

    # -- before the cleaning loop ---------------------------------------------------------------------------

    def delete_old_segments(self) -> list[RetentionResult]:
        """Kafka's ``LogManager.cleanupLogs``: retention on every partition (``delete`` and ``compact,delete``
        topics lose old segments, any topic loses segments below its log start offset); the partitions that
        lost a segment. One partition's failure does not stop the others."""
        return [r for r in apply_retention(self.logs, keep_going=True, only_due=True) if r.segments_deleted]

    def abort_timed_out_transactions(self) -> list[str]:
        """The ``TransactionCoordinator``'s ``transaction-abort`` timer (``abortTimedOutTransactions``), run before
        each cleaning loop (not on a timer of its own):
        a transaction open for longer than its ``transaction.timeout.ms`` (its producer died) is aborted, so it
        stops holding its partitions' last stable offset, and so the cleaner's dirty section, back. Returns the
        transactional ids it completed; a failure is logged and the loop cleans all the same."""
        none: list[str] = []
        done = self._guarded("aborting timed-out transactions", none, lambda: TransactionCoordinator(
            self.logs).abort_timed_out_transactions(self.clock.now_ms()))
        if done:
            log.info("aborted or completed %d timed-out transaction(s): %s", len(done), ", ".join(done))
        return done

    def expire_offsets(self) -> int:
        """The ``GroupMetadataManager``'s offset expiration timer (``cleanupGroupMetadata``, every
        ``offsets.retention.check.interval.ms``): committed
        offsets older than ``offsets.retention.minutes`` go (tombstones in ``__consumer_offsets``, which the
        cleaning loop then compacts). Returns how many went; a failure is logged and the cycle goes on."""
        now = self._timer_due("offsets", self.config.offsets_retention_check_interval_ms)
        if now is None:
            return 0
        return self._guarded("expiring committed offsets", 0,
                             lambda: sum(map(len, self.offsets.expire_offsets(now).values())))

    def expire_transactional_ids(self) -> list[str]:
        """The ``TransactionCoordinator``'s timer for ``transactional.id.expiration.ms`` (Kafka's
        ``TransactionStateManager.removeExpiredTransactionalIds``, every
        ``transaction.remove.expired.transaction.cleanup.interval.ms``). Returns the ids expired; a failure is
        logged and the cycle goes on."""
        now = self._timer_due("transactional ids",
                              self.config.transaction_remove_expired_transaction_cleanup_interval_ms)
        none: list[str] = []
        if now is None:
            return none
        done = self._guarded("expiring transactional ids", none, lambda: TransactionCoordinator(
            self.logs).expire_transactional_ids(now, self.config.transactional_id_expiration_ms))
        if done:
            log.info("expired %d transactional id(s) (transactional.id.expiration.ms): %s", len(done), ", ".join(done))
        return done

    # -- after the cleaning loop ----------------------------------------------------------------------------

    def vacuum(self) -> list[VacuumResult]:
        """The deletion Kafka schedules ``file.delete.delay.ms`` after a segment is replaced (``delete-file``): VACUUM of files
        replaced that long ago, of what failed ``format("deltalog")`` writes staged, and of temporary files of
        killed writes (both after a day). The results that removed files; nothing when vacuum is off."""
        if not self.vacuum_enabled:
            return []
        now = self.clock.now_ms()
        return [v for v in (*vacuum_store(self.logs, dry_run=False, keep_going=True, only_due=True),
                            vacuum_staged(self.logs.storage, now, dry_run=False),
                            vacuum_temp_files(self.logs.storage, now, dry_run=False)) if v.files]

    # -- timers -----------------------------------------------------------------------------------------------

    def _timer_due(self, timer: str, interval_ms: int) -> int | None:
        """The time now if ``timer`` is due (at its first look, then once every ``interval_ms``), recording that it
        runs; None if it ran less than ``interval_ms`` ago."""
        now = self.clock.now_ms()
        last = self._timers_ran_ms.get(timer)
        if last is not None and now - last < interval_ms:
            return None
        self._timers_ran_ms[timer] = now
        return now

    @staticmethod
    def _guarded(what: str, empty: T, step: Callable[[], T]) -> T:
        """``step()``, or ``empty`` when it fails with a deltalog error (logged): a timer's failure never stops the
        cycle, and the timer tries again next time."""
        try:
            return step()
        except DeltalogError as e:
            log.warning("%s failed; tried again next time: %s", what, e)
            return empty
