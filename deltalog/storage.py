"""State files beside the data: small JSON documents written whole, read whole.

The cleaner's records (uncleanable marks, last pass and run figures), the data-quality results and the
lease files are small JSON documents. Every one is written here, so that a reader sees either the old
content or the new one, never a torn file, and so that there is one place to change when the store
lives somewhere other than a local disk.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any


def write_json(path: str, payload: Any, *, indent: int | None = 2) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (a temporary file, then a rename over it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=indent, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_json(path: str) -> Any | None:
    """The JSON document at ``path``; None when there is none or it is not valid JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None
