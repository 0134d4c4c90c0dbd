"""Real delta-rs OPTIMIZE and Z-order in another process, in a loop, while deltalog appends, relays out, applies
retention and cleans: seeded random rounds, the model checked after each (every acknowledged offset served once,
every key's latest present; see :mod:`tooling.reliability.other_engines`). The deterministic hooks at each window
are in ``test_concurrent_optimize.py``; the quick run here uses a thread for the other engine, so the default run
(no processes of its own) races too.
"""

from __future__ import annotations

import pytest

from deltalog import Store
from tooling.reliability.other_engines import COMPACTED, DELETED, OtherEngine, create_topics, run_rounds


def _race(store: Store, clock, tmp_path, *, rounds: int, seed: int, clean: bool = False, in_thread: bool = False):
    create_topics(store)
    engine = OtherEngine([store.log(COMPACTED, 0).uri, store.log(DELETED, 0).uri], seed, tmp_path,
                         in_thread=in_thread)
    try:
        figures = run_rounds(store, clock, rounds, seed, clean=clean)
    finally:
        optimized = engine.stop()
    assert figures.violations == [], figures
    assert figures.rounds == rounds
    return figures, optimized


def test_a_threaded_optimize_loop_duplicates_nothing(store, clock, tmp_path):
    figures, optimized = _race(store, clock, tmp_path, rounds=40, seed=7, in_thread=True)
    assert optimized["compact"] + optimized["z_order"] > 0


@pytest.mark.subprocess
@pytest.mark.parametrize("seed", [1, 2])
def test_an_optimize_process_duplicates_nothing(store, clock, tmp_path, seed):
    figures, optimized = _race(store, clock, tmp_path, rounds=60, seed=seed)
    assert optimized["compact"] + optimized["z_order"] > 0


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("seed", range(10, 15))
def test_an_optimize_process_over_hundreds_of_rounds_duplicates_nothing(store, clock, tmp_path, seed):
    _race(store, clock, tmp_path, rounds=200, seed=seed)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("seed", [21, 22])
def test_an_optimize_process_during_cleaning_duplicates_nothing(spark_store, clock, tmp_path, seed):
    figures, _ = _race(spark_store, clock, tmp_path, rounds=60, seed=seed, clean=True)
    assert figures.cleans > 0
