"""Packaging: one wheel, installed like a library. The base install runs everything that needs no Spark;
pyspark (``deltalog[spark]``) and great-expectations (``deltalog[quality]``) are extras, so that a Databricks
runtime keeps its own Spark.

Real builds: the wheel is built by the Databricks bundle's own artifact command (``uv build --wheel``, as
Databricks' default-python template) from a copy of the repository's files, its file list, RECORD and metadata
are read back, and it is installed into a fresh virtual environment without pyspark, where the console script
creates a topic, produces, consumes and describes, and a command that needs Spark names the extra to install.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
#: What a user's install must not bring: a second Spark on a Databricks cluster, seconds of import for checks.
EXTRAS_ONLY = {"pyspark", "great-expectations", "pandas"}


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def wheel_contents(path: Path) -> tuple[list[str], list[Requirement], dict[str, str]]:
    """The wheel's file names, Requires-Dist and console scripts, after checking every file against RECORD."""
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
    return names, requires, scripts


def unconditional(requires: list[Requirement]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in requires if r.marker is None or "extra" not in str(r.marker)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel the bundle deploys, built by its artifact command from a copy of the repository's files (what
    git tracks or would track), so the build sees what a fresh clone holds and leaves the checkout alone."""
    with open(ROOT / "databricks.yml", encoding="utf-8") as f:
        artifact = yaml.safe_load(f)["artifacts"]["deltalog_wheel"]
    src = tmp_path_factory.mktemp("clone")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    argv = shlex.split(artifact["build"])
    assert shutil.which(argv[0]), f"{argv[0]} is not installed: pip install -e '.[dev]'"
    subprocess.run(argv, cwd=src, check=True, timeout=600, capture_output=True)
    [source] = [f["source"] for f in artifact["files"]]
    [built] = sorted(src.glob(source))  # the one wheel the bundle uploads
    return built


def test_the_declared_pyspark_range_covers_the_supported_runtimes():
    [spark] = [Requirement(d) for d in project()["project"]["optional-dependencies"]["spark"]
               if d.startswith("pyspark")]
    assert spark.extras == {"connect"}  # Spark Connect sessions (builder.remote) need its client
    # 4.0: Databricks Runtime 17.3 LTS, serverless environment 4; 4.1: 18 LTS; 4.2: 19; 4.3: the embedded default
    for version in ("4.0.0", "4.1.0", "4.2.0", "4.3.0"):
        assert spark.specifier.contains(version), version
    assert not spark.specifier.contains("3.5.2")  # 16.4 LTS: no Python data sources over Connect
    assert spark.specifier.contains(importlib.metadata.version("pyspark"))


def test_the_dev_extra_brings_spark_checks_and_every_test_library():
    extras = project()["project"]["optional-dependencies"]
    dev = [Requirement(d) for d in extras["dev"]]
    [itself] = [r for r in dev if canonicalize_name(r.name) == "deltalog"]
    assert {"spark", "quality"} <= itself.extras
    # every third-party module the tests and tooling import at their top is a requirement of dev (or of its extras)
    declared = {canonicalize_name(r.name) for r in dev} | {
        canonicalize_name(Requirement(d).name) for e in itself.extras for d in extras[e]} | {
        canonicalize_name(Requirement(d).name) for d in project()["project"]["dependencies"]}
    for module, dist in (("pytest", "pytest"), ("hypothesis", "hypothesis"), ("moto", "moto"), ("yaml", "pyyaml"),
                         ("databricks.bundles", "databricks-bundles"), ("kafka", "kafka-python"),
                         ("great_expectations", "great-expectations"), ("pyspark", "pyspark"), ("uv", "uv")):
        assert dist in declared, f"{module} ({dist}) is not in the dev extra"


@pytest.mark.subprocess
def test_the_wheel_holds_the_package_alone_and_requires_no_spark(wheel):
    names, requires, scripts = wheel_contents(wheel)
    assert wheel.name == f"deltalog-{project()['project']['version']}-py3-none-any.whl"
    assert {n.split("/")[0] for n in names} == {"deltalog", "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    assert not [n for n in names if re.search(r"(^|/)(tooling|tests|benchmarks|reliability|testing)/", n)]
    assert "deltalog/cli/doctor_checks.py" in names and "deltalog/log/faults.py" in names

    base = unconditional(requires)
    declared = {canonicalize_name(Requirement(d).name): Requirement(d) for d in project()["project"]["dependencies"]}
    assert {k: str(v.specifier) for k, v in base.items()} == {k: str(v.specifier) for k, v in declared.items()}
    assert not EXTRAS_ONLY & base.keys()
    by_extra: dict[str, set[str]] = {}
    for r in requires:
        for extra in re.findall(r'extra == "([^"]+)"', str(r.marker or "")):
            by_extra.setdefault(extra, set()).add(canonicalize_name(r.name))
    assert {"pyspark", "pandas"} <= by_extra["spark"] and "great-expectations" not in by_extra["spark"]
    assert "great-expectations" in by_extra["quality"] and "pyspark" not in by_extra["quality"]
    assert scripts == project()["project"]["scripts"]


def test_no_dependency_of_the_base_install_brings_pyspark_back():
    """What pip installs with the wheel, walked through the installed distributions' own metadata: none of it
    requires pyspark (which would drag a second Spark onto a cluster) or great-expectations."""
    seen: set[str] = set()
    todo = [Requirement(d) for d in project()["project"]["dependencies"]]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        assert name not in EXTRAS_ONLY, f"{req} brings {name}"
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
    assert {"deltalake", "pyarrow", "numpy", "obstore"} <= seen


@pytest.mark.subprocess
@pytest.mark.network
def test_the_base_install_runs_without_spark_and_names_the_extra(wheel, tmp_path):
    """A fresh virtual environment, the wheel with its base requirements only (from PyPI): the console script
    works on a store, and a command that needs Spark says in one line which extra to install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DELTALOG_STORE")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([str(bindir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, timeout=900, env=env, cwd=tmp_path, capture_output=True)
    probe = subprocess.run([str(bindir / "python"), "-c",
                            "import importlib.util as u, deltalog, deltalog.cli, deltalog.store, deltalog.jobs.cleaner_job;"
                            "print(deltalog.__file__);"
                            "print([m for m in ('pyspark', 'great_expectations', 'pandas') if u.find_spec(m)])"],
                           check=True, timeout=120, env=env, cwd=tmp_path, capture_output=True, text=True)
    where, present = probe.stdout.splitlines()
    assert where.startswith(str(venv)) and present == "[]"  # the installed wheel, and no Spark beside it

    store = str(tmp_path / "store")

    def deltalog(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(bindir / "deltalog"), "--store", store, *args], input=stdin, env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)

    created = deltalog("topics", "create", "fruit-prices", "-p", "2", "--config", "cleanup.policy=compact")
    assert created.returncode == 0, created.stderr
    produced = deltalog("produce", "fruit-prices", "--property", "parse.key=true", "--property", "key.separator=:",
                        stdin="grape:2.69\nlime:0.49\n")
    assert produced.returncode == 0, produced.stderr
    consumed = deltalog("consume", "fruit-prices", "--from-beginning", "--property", "print.key=true",
                        "--property", "print.partition=true")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["Partition:0\tlime\t0.49", "Partition:1\tgrape\t2.69"]  # murmur2
    described = deltalog("topics", "describe", "fruit-prices", "--output", "json")
    assert described.returncode == 0, described.stderr
    [topic] = [json.loads(line) for line in described.stdout.splitlines()]
    assert [p["log_end_offset"] for p in topic["partitions"]] == [1, 1]
    doctor = deltalog("doctor", "--no-spark")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr

    for command, needs, extra in ((["demo"], "Spark", "spark"), (["clean"], "Spark", "spark"),
                                  (["sql", "--engine", "spark", "SELECT 1"], "Spark", "spark"),
                                  (["sql", "SELECT 1"], "DuckDB", "sql")):
        result = deltalog(*command)
        assert result.returncode == 1 and result.stdout == ""
        [line] = result.stderr.splitlines()  # one line, no traceback
        assert line.startswith(f"deltalog: error: deltalog {command[0]} needs {needs}") and \
            f"pip install 'deltalog[{extra}]'" in line, line
