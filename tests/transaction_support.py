"""Helpers the transaction tests share (not a test module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from deltalog import Store
from deltalog.log import producer_state

REPO = Path(__file__).resolve().parents[1]


def age_transactional_id(store: Store, transactional_id: str, age_ms: int) -> None:
    """Make the document of ``transactional_id`` in a store on the local disk last written ``age_ms`` ago on the
    store's clock, which on a local disk is the files' modification time (``deltalog.coordinator.transaction.store_clock``): as if
    that long had passed since its last write, without waiting."""
    storage = store.log_manager.storage
    assert storage.local, "only a local disk's modification times can be set back"
    path = producer_state.transactional_location(storage, transactional_id)
    then = time.time() - age_ms / 1000
    os.utime(path, (then, then))


def kill_mid_transaction(root: Path, *, plain_first: bool = False, transactional_id: str = "app") -> None:
    """A real producer process SIGKILLed with a transaction of ``transactional_id`` open in t-0 and t-1 (records
    ``a``/``b`` = ``dead``), as a crashed producer leaves one: nothing ends it but the coordinator. With
    ``plain_first``, a record outside any transaction (``before`` = ``1``) goes to t-0 before the transaction."""
    plain = 'store.producer().send("t", [Record(b"before", b"1")], partition=0)' if plain_first else ""
    script = textwrap.dedent(f"""
        import time
        from deltalog import Record, Store
        store = Store({str(root)!r})
        {plain}
        p = store.producer(transactional_id={transactional_id!r})
        p.init_transactions()
        p.begin_transaction()
        p.send("t", [Record(b"a", b"dead")], partition=0)
        p.send("t", [Record(b"b", b"dead")], partition=1)
        print("sent", flush=True)
        time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    assert line == "sent", f"the producer process did not get its transaction open: {err[-2000:]}"
    assert proc.returncode == -signal.SIGKILL, proc.returncode
