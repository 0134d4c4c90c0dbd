"""A real full disk for tests: a small tmpfs mounted on a directory, and a way to fill it to the last bytes.

Mounting needs root (``mount -t tmpfs``), which CI has; :class:`TmpfsUnavailable` says why it could not be done
elsewhere, so a test can skip there and only there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class TmpfsUnavailable(RuntimeError):
    """This machine cannot mount a tmpfs for this process (not root, or no mount permission in the container)."""


@contextmanager
def small_disk(where: Path, size_bytes: int = 8 * 1024 * 1024) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``where`` (created if needed) for the block, unmounted after it."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise TmpfsUnavailable("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        raise TmpfsUnavailable(f"mount -t tmpfs failed: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` up to its last block, then free ``leave`` bytes of it; returns the filler file (remove it to
    free the space). Written with ``os.write``: a buffered file would fail again when it is closed."""
    filler = disk / f"filler-{leave}-{os.urandom(3).hex()}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler
