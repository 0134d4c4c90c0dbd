"""deltalog's PEP 517 build backend: setuptools', plus one switch for runtimes that provide Spark.

A Databricks cluster (and serverless compute) brings its own PySpark: on Databricks Runtime it is not an
installed distribution but files on the interpreter's path, and on serverless it comes with
``databricks-connect``. A wheel that requires ``pyspark`` therefore makes pip download the PyPI pyspark
into the cluster's environment, a second Spark that shadows or breaks the runtime's. On a laptop, though,
``pip install -e .`` must bring pyspark, because the embedded local session is deltalog's default.

So the requirement stays in ``pyproject.toml`` and every ordinary build keeps it; a build asked for with the
config setting ``deltalog.spark=provided`` (Maven's "provided" scope: the runtime supplies it) writes a wheel
whose metadata leaves out the unconditional ``pyspark`` requirement and nothing else::

    python -m pip wheel . --no-deps -w dist/databricks -C deltalog.spark=provided
    python -m build --wheel -C deltalog.spark=provided        # or: uv build --wheel -C ...

``python build_backend/deltalog_build.py DIR`` does the first into an emptied ``DIR`` and checks the result;
that is the build command of the asset bundle's artifact (``databricks.yml``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517 hooks, unchanged)

SETTING = "deltalog.spark"
CHOICES = ("required", "provided")
#: The distributions a "provided" build does not require.
PROVIDED = ("pyspark",)
_REQUIRES_DIST = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)", re.IGNORECASE)
_EXTRA_MARKER = re.compile(r";.*\bextra\s*==")


def spark_provided(config_settings: dict[str, Any] | None) -> bool:
    """Whether the build was asked for with ``deltalog.spark=provided``; a value not in CHOICES is an error."""
    value = (config_settings or {}).get(SETTING, "required")
    if isinstance(value, list):  # pip passes a repeated -C key as a list; the last one wins
        value = value[-1]
    if value not in CHOICES:
        raise ValueError(f"config setting {SETTING}={value!r}: allowed values are {', '.join(CHOICES)}")
    return value == "provided"


def _setuptools_settings(config_settings: dict[str, Any] | None) -> dict[str, Any] | None:
    if config_settings is None:
        return None
    return {k: v for k, v in config_settings.items() if k != SETTING}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def strip_provided(metadata: str) -> str:
    """The METADATA text without the unconditional requirements on PROVIDED distributions (an extra that
    asks for pyspark explicitly keeps it)."""
    kept = []
    for line in metadata.splitlines(keepends=True):
        m = _REQUIRES_DIST.match(line)
        if m and _canonical(m.group(1)) in PROVIDED and not _EXTRA_MARKER.search(line):
            continue
        kept.append(line)
    return "".join(kept)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"sha256={digest}"


def rewrite_wheel(path: str) -> None:
    """Strip the provided requirements from a built wheel's METADATA and fix its RECORD line, in place."""
    with zipfile.ZipFile(path) as zin:
        infos = zin.infolist()
        contents = {info.filename: zin.read(info.filename) for info in infos}
    metadata_name = next(n for n in contents if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
    record_name = metadata_name[: -len("METADATA")] + "RECORD"
    new_metadata = strip_provided(contents[metadata_name].decode("utf-8")).encode("utf-8")
    contents[metadata_name] = new_metadata
    record_lines = []
    for line in contents[record_name].decode("utf-8").splitlines():
        if line.split(",", 1)[0] == metadata_name:
            line = f"{metadata_name},{_record_hash(new_metadata)},{len(new_metadata)}"
        record_lines.append(line)
    contents[record_name] = ("\n".join(record_lines) + "\n").encode("utf-8")
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in infos:
            zout.writestr(info, contents[info.filename])
    os.replace(tmp, path)


def _strip_metadata_directory(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(strip_provided(text))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    name = _setuptools.prepare_metadata_for_build_wheel(metadata_directory, _setuptools_settings(config_settings))
    if spark_provided(config_settings):
        _strip_metadata_directory(os.path.join(metadata_directory, name, "METADATA"))
    return name


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    name = _setuptools.prepare_metadata_for_build_editable(metadata_directory, _setuptools_settings(config_settings))
    if spark_provided(config_settings):
        _strip_metadata_directory(os.path.join(metadata_directory, name, "METADATA"))
    return name


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    provided = spark_provided(config_settings)  # refuse a bad value before building
    name = _setuptools.build_wheel(wheel_directory, _setuptools_settings(config_settings), metadata_directory)
    if provided:
        rewrite_wheel(os.path.join(wheel_directory, name))
    return name


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    provided = spark_provided(config_settings)
    name = _setuptools.build_editable(wheel_directory, _setuptools_settings(config_settings), metadata_directory)
    if provided:
        rewrite_wheel(os.path.join(wheel_directory, name))
    return name


def build_provided_wheel(out_dir: str, project_dir: str | None = None) -> str:
    """Build the wheel for a runtime that provides Spark into an emptied ``out_dir`` (so the bundle never
    uploads a stale wheel beside it) and check its metadata; returns the wheel's path."""
    project_dir = project_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    subprocess.run([sys.executable, "-m", "pip", "wheel", project_dir, "--no-deps", "--quiet",
                    "--wheel-dir", out_dir, "--config-settings", f"{SETTING}=provided"], check=True)
    wheels = [n for n in os.listdir(out_dir) if n.endswith(".whl")]
    if len(wheels) != 1:
        raise SystemExit(f"expected one wheel in {out_dir}, found {wheels}")
    path = os.path.join(out_dir, wheels[0])
    with zipfile.ZipFile(path) as z:
        metadata = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    if strip_provided(metadata) != metadata:
        raise SystemExit(f"{path} still requires one of {PROVIDED}")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        raise SystemExit("usage: python build_backend/deltalog_build.py OUT_DIR   "
                         "(builds the wheel for runtimes that provide Spark)")
    print(build_provided_wheel(sys.argv[1]))
