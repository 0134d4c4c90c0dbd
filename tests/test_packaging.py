"""Packaging: a laptop install brings pyspark, the wheel built for Databricks leaves it to the runtime.

Real builds through pip and the in-tree backend (build_backend/deltalog_build.py), the same commands the
README and databricks.yml give; the wheels' metadata and RECORD are read back and checked.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import zipfile

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("deltalog_build", os.path.join(ROOT, "build_backend", "deltalog_build.py"))
assert _spec and _spec.loader
deltalog_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deltalog_build)


def project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def wheel_metadata(path: str) -> tuple[list[Requirement], dict[str, str]]:
    """The wheel's Requires-Dist and console scripts, after checking every file against RECORD."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        [record] = [n for n in names if n.endswith(".dist-info/RECORD")]
        for line in z.read(record).decode().splitlines():
            name, digest, size = line.rsplit(",", 2)
            if name == record:
                continue
            data = z.read(name)
            expected = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (expected, len(data)), f"{name} does not match RECORD"
        metadata = z.read(record.replace("RECORD", "METADATA")).decode()
        entry_points = z.read(record.replace("RECORD", "entry_points.txt")).decode()
    requires = [Requirement(v) for k, v in (line.split(": ", 1) for line in metadata.splitlines() if ": " in line)
                if k == "Requires-Dist"]
    scripts = dict(re.findall(r"^(\S+) = (\S+)$", entry_points.split("[console_scripts]", 1)[1], re.M))
    return requires, scripts


def unconditional(requires: list[Requirement]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in requires if r.marker is None or "extra" not in str(r.marker)}


def test_strip_provided_drops_only_the_unconditional_pyspark_requirement():
    metadata = (
        "Metadata-Version: 2.1\nName: deltalog\n"
        "Requires-Dist: pyspark<4.4,>=4.0\n"
        "Requires-Dist: PySpark[connect]>=4.0; python_version >= \"3.10\"\n"
        "Requires-Dist: pyspark-stubs>=1\n"
        "Requires-Dist: deltalake<2,>=1.6\n"
        "Requires-Dist: pyspark>=4.0; extra == \"spark\"\n"
    )
    assert deltalog_build.strip_provided(metadata) == (
        "Metadata-Version: 2.1\nName: deltalog\n"
        "Requires-Dist: pyspark-stubs>=1\n"
        "Requires-Dist: deltalake<2,>=1.6\n"
        "Requires-Dist: pyspark>=4.0; extra == \"spark\"\n"
    )
    assert deltalog_build.spark_provided({"deltalog.spark": "provided"})
    assert deltalog_build.spark_provided({"deltalog.spark": ["required", "provided"]})  # the last -C wins
    assert not deltalog_build.spark_provided(None) and not deltalog_build.spark_provided({"other": "x"})
    with pytest.raises(ValueError, match="allowed values are required, provided"):
        deltalog_build.spark_provided({"deltalog.spark": "none"})


def test_the_declared_pyspark_range_covers_the_supported_runtimes():
    [spark] = [Requirement(d) for d in project()["project"]["dependencies"] if d.startswith("pyspark")]
    # 4.0: Databricks Runtime 17.3 LTS, serverless environment 4; 4.1: 18 LTS; 4.2: 19; 4.3: the embedded default
    for version in ("4.0.0", "4.1.0", "4.2.0", "4.3.0"):
        assert spark.specifier.contains(version), version
    assert not spark.specifier.contains("3.5.2")  # 16.4 LTS: no Python data sources over Connect
    assert spark.specifier.contains(importlib.metadata.version("pyspark"))


def test_the_databricks_wheel_leaves_pyspark_to_the_runtime(tmp_path):
    """Build both wheels as their users do: the bundle's artifact command, and a plain ``pip wheel``."""
    with open(os.path.join(ROOT, "databricks.yml"), encoding="utf-8") as f:
        build = yaml.safe_load(f)["artifacts"]["deltalog_wheel"]["build"]
    argv = shlex.split(build)
    assert argv[0] == "python"
    out = tmp_path / "databricks"
    subprocess.run([sys.executable, *argv[1:-1], str(out)], cwd=ROOT, check=True, timeout=600)
    [provided_wheel] = os.listdir(out)
    subprocess.run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--quiet", "--wheel-dir",
                    str(tmp_path / "laptop")], check=True, timeout=600)
    [laptop_wheel] = os.listdir(tmp_path / "laptop")
    assert provided_wheel == laptop_wheel  # same name and version: only the metadata differs

    provided, provided_scripts = wheel_metadata(str(out / provided_wheel))
    laptop, laptop_scripts = wheel_metadata(str(tmp_path / "laptop" / laptop_wheel))
    declared = {canonicalize_name(Requirement(d).name): Requirement(d) for d in project()["project"]["dependencies"]}
    assert {k: str(v.specifier) for k, v in unconditional(laptop).items()} == {
        k: str(v.specifier) for k, v in declared.items()}
    assert unconditional(provided).keys() == declared.keys() - {"pyspark"}
    assert sorted(map(str, provided)) == sorted(str(r) for r in laptop if canonicalize_name(r.name) != "pyspark"
                                                or (r.marker and "extra" in str(r.marker)))
    assert provided_scripts == laptop_scripts == project()["project"]["scripts"]


def test_no_dependency_of_the_databricks_wheel_brings_pyspark_back():
    """What pip would install with the wheel on a cluster, walked through the installed distributions'
    own metadata: none of it requires pyspark (which would drag a second Spark onto the cluster)."""
    seen: set[str] = set()
    todo = [Requirement(d) for d in project()["project"]["dependencies"] if not d.startswith("pyspark")]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        assert name != "pyspark", f"{req} brings pyspark"
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(sub)
    assert {"deltalake", "pyarrow", "numpy", "great-expectations", "pandas"} <= seen
