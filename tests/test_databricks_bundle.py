"""The Databricks deployment stays deployable: databricks.yml and conf/cleaner_job.json, checked offline.

The bundle is read as the Databricks CLI reads it (the included resource files, each target's overrides
merged in, tasks and job clusters merged by key, variables resolved) and every target's job is validated
with Databricks' own typed models: ``databricks.bundles.jobs.Job`` (databricks-bundles) and the Jobs API's
``JobSettings`` (databricks-sdk). The job JSON goes through ``JobSettings`` and back, so a field the API does
not know (a typo) is caught. The task's entry point is run the way a ``python_wheel_task`` runs it.
"""

from __future__ import annotations

import copy
import glob
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stdout
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job
from databricks.sdk.service.jobs import JobSettings

from deltalog import Record, Store
from deltalog.jobs.cleaner_job import JobConfig, build_parser

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = "deltalog_cleaner"
USER = "someone@example.com"
#: Variables with no value in a target: given at deploy time with --var (docs/jobs-and-databricks.md, "Run on Databricks").
DEPLOY_TIME_VARIABLES = {"dev": {"store_uri"}, "serverless": {"store_uri"}, "prod": {"store_uri", "failure_email",
                                                                                    "run_as_service_principal"}}
REFERENCE = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")


def read_yaml(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def bundle_root_config() -> dict[str, Any]:
    """databricks.yml with its ``include`` files merged in (no target applied)."""
    config = read_yaml(os.path.join(ROOT, "databricks.yml"))
    for pattern in config.get("include", []):
        paths = sorted(glob.glob(os.path.join(ROOT, pattern)))
        assert paths, f"include pattern {pattern!r} matches no file"
        for path in paths:
            config = merge(config, read_yaml(path))
    return config


def merge(left: Any, right: Any) -> Any:
    """The CLI's merge of configuration trees: mappings key by key, sequences appended, scalars replaced."""
    if isinstance(left, dict) and isinstance(right, dict):
        out = dict(left)
        for k, v in right.items():
            out[k] = merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if isinstance(left, list) and isinstance(right, list):
        return left + copy.deepcopy(right)
    return copy.deepcopy(right)


def merge_by_key(items: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The CLI's MergeJobTasks / MergeJobClusters: elements with the same key become one, sorted by key."""
    merged: dict[str, dict[str, Any]] = {}
    for item in items:
        merged[item[key]] = merge(merged[item[key]], item) if item[key] in merged else item
    return [merged[k] for k in sorted(merged)]


def target_config(target: str, *, deploy_vars: dict[str, str] | None = None,
                  file_path: str | None = None) -> dict[str, Any]:
    """The bundle as ``databricks bundle deploy -t TARGET --var ...`` sees it, every reference resolved."""
    root = bundle_root_config()
    overrides = root.get("targets", {})[target]
    config = {k: v for k, v in root.items() if k != "targets"}
    for section in ("resources", "artifacts", "workspace"):
        if section in overrides:
            config[section] = merge(config.get(section, {}), overrides[section])
    for section in ("run_as", "permissions"):  # a target's own replace the bundle's
        if section in overrides:
            config[section] = overrides[section]
    for job in config["resources"]["jobs"].values():
        job["tasks"] = merge_by_key(job.get("tasks", []), "task_key")
        if "job_clusters" in job:
            job["job_clusters"] = merge_by_key(job["job_clusters"], "job_cluster_key")

    values: dict[str, Any] = {}
    for name, spec in config.get("variables", {}).items():
        if name in (overrides.get("variables") or {}):
            values[name] = overrides["variables"][name]
        elif "default" in spec:
            values[name] = spec["default"]
    values.update(deploy_vars or {})
    known = {
        "bundle.name": config["bundle"]["name"],
        "bundle.target": target,
        "workspace.current_user.userName": USER,
        "workspace.file_path": file_path or f"/Workspace/Users/{USER}/.bundle/{config['bundle']['name']}/{target}/files",
        **{f"var.{k}": v for k, v in values.items()},
    }

    def resolve(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, str):
            for _ in range(5):  # a variable's value may itself hold a reference
                missing = [r for r in REFERENCE.findall(value) if r not in known]
                assert not missing, f"target {target}: unresolved reference(s) {missing} in {value!r}"
                value = REFERENCE.sub(lambda m: str(known[m.group(1)]), value)
            return value
        return value

    return resolve(config)


def references(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(references(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(references(v) for v in value)) if value else set()
    return set(REFERENCE.findall(value)) if isinstance(value, str) else set()


def pyproject() -> dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def wheel_task(job: dict[str, Any]) -> dict[str, Any]:
    [task] = [t for t in job["tasks"] if "python_wheel_task" in t]
    return task


def assert_sdk_round_trip(settings: dict[str, Any]) -> None:
    """The Jobs API model keeps every field: one it drops is a field (or enum value) the API does not have."""
    assert JobSettings.from_dict(settings).as_dict() == settings


def deploy_vars(target: str) -> dict[str, str]:
    return {name: {"store_uri": "s3://my-bucket/deltalog", "failure_email": "oncall@example.com",
                   "run_as_service_principal": "6f1c3e2a-0000-4000-8000-00000000c1ea"}[name]
            for name in DEPLOY_TIME_VARIABLES[target]}


TARGETS = sorted(DEPLOY_TIME_VARIABLES)


def test_the_targets_are_the_documented_ones():
    targets = bundle_root_config()["targets"]
    assert sorted(targets) == TARGETS and targets["dev"].get("default") is True
    assert {t: targets[t]["mode"] for t in TARGETS} == {"dev": "development", "prod": "production",
                                                          "serverless": "development"}
    # the CLI refuses a production target (deployed by a user) that does not pin its root path
    prod = target_config("prod", deploy_vars=deploy_vars("prod"))
    assert prod["workspace"]["root_path"] == f"/Workspace/Users/{USER}/.bundle/deltalog/prod"
    # production runs as a service principal and says who may manage and run the job
    assert prod["run_as"] == {"service_principal_name": "6f1c3e2a-0000-4000-8000-00000000c1ea"}
    assert prod["permissions"] == [{"level": "CAN_MANAGE", "user_name": USER},
                                   {"level": "CAN_RUN", "group_name": "users"}]
    assert "run_as" not in target_config("dev", deploy_vars=deploy_vars("dev"))  # development runs as its user


@pytest.mark.parametrize("target", TARGETS)
def test_each_target_deploys_a_valid_job(target):
    config = target_config(target, deploy_vars=deploy_vars(target))
    job = config["resources"]["jobs"][JOB]
    Job.from_dict(copy.deepcopy(job))  # databricks-bundles: unknown fields and bad enum values raise
    assert_sdk_round_trip(job)
    assert job["schedule"]["quartz_cron_expression"] and job["max_concurrent_runs"] >= 1
    assert job["email_notifications"]["on_failure"] == [
        "oncall@example.com" if target == "prod" else USER]

    task = wheel_task(job)
    artifact = config["artifacts"]["deltalog_wheel"]
    [wheel_glob] = [f["source"] for f in artifact["files"]]
    if target == "serverless":
        assert "job_clusters" not in job and "libraries" not in task and "job_cluster_key" not in task
        [env] = [e for e in job["environments"] if e["environment_key"] == task["environment_key"]]
        assert int(env["spec"]["environment_version"]) >= 4  # a Spark 4 client (Databricks Connect 17+)
        wheels = env["spec"]["dependencies"]
    else:
        assert "environments" not in job and "environment_key" not in task
        [cluster] = [c for c in job["job_clusters"] if c["job_cluster_key"] == task["job_cluster_key"]]
        major, minor = (int(x) for x in cluster["new_cluster"]["spark_version"].split(".")[:2])
        assert (major, minor) >= (17, 3), "Databricks Runtime 17.3 LTS is the first with Spark 4"
        assert cluster["new_cluster"]["data_security_mode"] == "DATA_SECURITY_MODE_DEDICATED"  # RDD API
        wheels = [lib["whl"] for lib in task["libraries"]]
    # the compute installs exactly the wheel the artifact builds (paths in databricks.yml are from its directory)
    assert [os.path.normpath(w) for w in wheels] == [os.path.normpath(wheel_glob)]


@pytest.mark.subprocess
def test_the_job_runs_the_entry_point_with_absolute_paths():
    job = target_config("dev", deploy_vars=deploy_vars("dev"))["resources"]["jobs"][JOB]
    task = wheel_task(job)["python_wheel_task"]
    assert task["package_name"] == pyproject()["project"]["name"]
    args = build_parser().parse_args(task["parameters"])  # every parameter is one the entry point takes
    assert args.store == "s3://my-bucket/deltalog" and args.once
    # the config file is named by its absolute /Workspace path, never relative to a working directory
    prefix = f"/Workspace/Users/{USER}/.bundle/deltalog/dev/files/"
    assert args.config.startswith(prefix)
    in_repo = os.path.join(ROOT, args.config[len(prefix):])
    assert os.path.isfile(in_repo)
    ignored = subprocess.run(["git", "check-ignore", "-q", in_repo], cwd=ROOT).returncode == 0
    assert not ignored, "the bundle syncs only files git does not ignore"
    config = JobConfig.load(in_repo, store_uri=args.store)
    assert config.root == "s3://my-bucket/deltalog" and config.once


def test_variables_are_declared_used_and_given():
    root = bundle_root_config()
    declared = set(root["variables"])
    used = {r.split(".", 1)[1] for r in references({k: v for k, v in root.items() if k != "variables"})
            if r.startswith("var.")}
    assert used == declared, f"declared but unused: {declared - used}; used but undeclared: {used - declared}"
    for target in TARGETS:
        target_config(target, deploy_vars=deploy_vars(target))  # every reference resolves
        for missing in DEPLOY_TIME_VARIABLES[target]:  # and these really must be given
            partial = {k: v for k, v in deploy_vars(target).items() if k != missing}
            with pytest.raises(AssertionError, match=f"var.{missing}"):
                target_config(target, deploy_vars=partial)


def test_the_validation_catches_a_misspelled_field():
    """The checks above can fail: a typo in the job is refused by both models."""
    job = target_config("dev", deploy_vars=deploy_vars("dev"))["resources"]["jobs"][JOB]
    bad = copy.deepcopy(job)
    bad["tasks"][0]["python_wheel_task"]["entry_pont"] = bad["tasks"][0]["python_wheel_task"].pop("entry_point")
    with pytest.raises(ValueError, match="entry_pont"):
        Job.from_dict(bad)
    with pytest.raises(AssertionError):
        assert_sdk_round_trip(bad)
    bad = copy.deepcopy(job)
    bad["health"]["rules"][0]["metric"] = "RUN_DURATION"
    with pytest.raises(ValueError, match="RUN_DURATION"):
        Job.from_dict(bad)
    with pytest.raises(AssertionError):
        assert_sdk_round_trip(bad)


@pytest.mark.subprocess
def test_the_entry_point_exists_and_answers_help_in_a_subprocess():
    task = wheel_task(bundle_root_config()["resources"]["jobs"][JOB])["python_wheel_task"]
    target = pyproject()["project"]["scripts"][task["entry_point"]]
    module, attr = target.split(":")
    assert callable(getattr(importlib.import_module(module), attr))
    # as a python_wheel_task calls it: the parameters in sys.argv, the function called with no arguments
    code = (f"import sys; sys.argv = [{task['entry_point']!r}, '--help']; "
            f"from {module} import {attr}; {attr}()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert "--store" in out.stdout and "--config" in out.stdout and "--once" in out.stdout


def test_a_failing_run_raises_so_databricks_marks_it_failed(tmp_path, monkeypatch, capsys):
    """A python_wheel_task ignores the entry point's return value: failure must be a SystemExit."""
    from deltalog.jobs.cleaner_job import console_main

    monkeypatch.setattr(sys, "argv", ["deltalog-cleaner", "--config", str(tmp_path / "missing.json"), "--once"])
    with pytest.raises(SystemExit) as e:
        console_main()
    assert e.value.code == 1 and "does not exist" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["deltalog-cleaner", "--once"])  # no store at all
    with pytest.raises(SystemExit) as e:
        console_main()
    assert e.value.code == 2


def test_the_bundle_job_runs_a_cleaner_cycle(tmp_path, spark, monkeypatch):
    """The task's own parameters, with the synced files where the bundle syncs them and a local store in
    place of the bucket, run a real cycle through the entry point."""
    store_dir = tmp_path / "store"
    store = Store(store_dir, spark=spark)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    for r in range(2):
        store.append("t", 0, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])

    job = target_config("dev", deploy_vars={"store_uri": str(store_dir)}, file_path=ROOT)["resources"]["jobs"][JOB]
    task = wheel_task(job)["python_wheel_task"]
    target = pyproject()["project"]["scripts"][task["entry_point"]]
    module, attr = target.split(":")
    monkeypatch.setattr(sys, "argv", [task["entry_point"], *task["parameters"]])
    out = io.StringIO()
    with redirect_stdout(out):
        assert getattr(importlib.import_module(module), attr)() is None
    [line] = out.getvalue().splitlines()
    assert json.loads(line)["cleaned"] == ["t-0"]
    assert {r.key: r.value for r in store.read("t", 0, "earliest")} == {
        b"k0": b"v1", b"k1": b"v1", b"k2": b"v1", b"active": b"a"}


def test_the_artifact_build_command_is_the_templates_and_uploads_what_it_builds():
    """The build Databricks' default-python template uses; tests/test_packaging.py runs it and checks the wheel."""
    artifact = bundle_root_config()["artifacts"]["deltalog_wheel"]
    assert shlex.split(artifact["build"]) == ["uv", "build", "--wheel"] and artifact["path"] == "."
    assert pyproject()["build-system"]["build-backend"] == "setuptools.build_meta"
    [source] = [f["source"] for f in artifact["files"]]
    assert os.path.normpath(source) == os.path.join("dist", "*.whl")  # uv build's output directory


def test_the_job_json_is_a_valid_jobs_api_request():
    with open(os.path.join(ROOT, "conf", "cleaner_job.json"), encoding="utf-8") as f:
        job = json.load(f)
    assert_sdk_round_trip(job)
    Job.from_dict(copy.deepcopy(job))
    task = wheel_task(job)
    wheel = task["python_wheel_task"]
    assert wheel["package_name"] == pyproject()["project"]["name"]
    assert wheel["entry_point"] in pyproject()["project"]["scripts"]
    args = build_parser().parse_args(wheel["parameters"])
    assert os.path.isabs(args.config) and args.store and args.once
    [library] = task["libraries"]
    assert re.fullmatch(r"/Volumes/.+/deltalog-[^/]+-py3-none-any\.whl", library["whl"])
    [cluster] = [c for c in job["job_clusters"] if c["job_cluster_key"] == task["job_cluster_key"]]
    assert cluster["new_cluster"]["data_security_mode"] == "DATA_SECURITY_MODE_DEDICATED"
    # the same job as the bundle's production target, apart from names, paths and compute wiring
    bundle_job = target_config("prod", deploy_vars=deploy_vars("prod"))["resources"]["jobs"][JOB]
    for key in ("schedule", "max_concurrent_runs", "timeout_seconds", "health", "notification_settings"):
        assert job[key] == bundle_job[key], key
    assert wheel["entry_point"] == wheel_task(bundle_job)["python_wheel_task"]["entry_point"]
