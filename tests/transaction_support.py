"""Helpers the transaction tests share (not a test module)."""

from __future__ import annotations

import os
import time

from deltalog import Store
from deltalog.log import producer_state


def age_transactional_id(store: Store, transactional_id: str, age_ms: int) -> None:
    """Make the document of ``transactional_id`` in a store on the local disk last written ``age_ms`` ago on the
    store's clock, which on a local disk is the files' modification time (``deltalog.log.store_clock``): as if
    that long had passed since its last write, without waiting."""
    storage = store.log_manager.storage
    assert storage.local, "only a local disk's modification times can be set back"
    path = producer_state.transactional_location(storage, transactional_id)
    then = time.time() - age_ms / 1000
    os.utime(path, (then, then))
