"""The machine and the versions a benchmark ran on, for the report (numbers mean nothing without them)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, object]:
    """Cores, memory, CPU model, OS, load at start, and the versions of everything measured."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = _memory_bytes()
    return {
        "cores": cores,
        "memory_gib": round(mem / 2**30, 1) if mem else None,
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "java": _java_version(),
        "versions": {p: _version(p) for p in ("deltalog", "pyspark", "deltalake", "pyarrow", "duckdb", "numpy")},
    }
