"""The smaller habits of a user's day with the CLI, each as a process: ``configs --entity-type topics`` as
kafka-configs users script it; ``Store`` in ``dir(deltalog)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def cli(store: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    return subprocess.run([sys.executable, "-m", "deltalog", "--store", str(store), *argv], capture_output=True,
                          text=True, env=env, cwd=store.parent, timeout=300)


def test_configs_entity_type_topics_alters_and_describes(tmp_path):
    store = tmp_path / "store"
    assert cli(store, "topics", "create", "orders").returncode == 0
    done = cli(store, "configs", "--alter", "--entity-type", "topics", "--entity-name", "orders",
               "--add-config", "cleanup.policy=compact,min.cleanable.dirty.ratio=0.1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating config for topic orders."
    done = cli(store, "configs", "--describe", "--entity-type", "topics", "--entity-name", "orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Dynamic configs for topic orders are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact}",
        "  min.cleanable.dirty.ratio=0.1 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:min.cleanable.dirty.ratio=0.1}"]
    done = cli(store, "configs", "--alter", "--topic", "orders", "--delete-config", "min.cleanable.dirty.ratio")
    assert done.returncode == 0, done.stderr
    done = cli(store, "-o", "json", "configs", "--describe", "--entity-type", "topics")
    assert json.loads(done.stdout) == {"topic": "orders", "configs": {"cleanup.policy": "compact"}}
    done = cli(store, "configs", "--describe", "--entity-type", "topics", "--entity-name", "orders", "--all")
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:segment.bytes=1073741824}" in \
        done.stdout.splitlines()
    done = cli(store, "configs", "--alter", "--topic", "orders", "--add-config", "nope=1")
    assert done.returncode == 1 and "Unknown topic config 'nope'" in done.stderr


def test_dir_of_the_package_names_what_it_imports_on_first_use(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import sys, deltalog; names = dir(deltalog); "
                           "print('Store' in names, 'Record' in names, 'pyarrow' in sys.modules)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.stdout.split() == ["True", "True", "False"], done.stderr


@pytest.mark.spark
def test_a_failing_check_prints_its_report_once(spark_store, clock):
    """``deltalog check`` as a process on a topic whose clean section holds a key twice: the report is on stdout
    once, and the log's copy of it (a warning, for jobs and notebooks) does not reach the terminal too."""
    from test_quality import TOPIC, damage_row, first_clean

    first_clean(spark_store, clock)
    damage_row(spark_store, 1, b"lime", b"0.49")  # an old lime, back below the checkpoint
    done = subprocess.run([sys.executable, "-m", "deltalog", "--store", spark_store.root, "check", TOPIC, "--cleans",
                           "none"], capture_output=True, text=True, cwd=Path(spark_store.root).parent, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.count("clean_section_keys_unique") >= 1
    assert "clean_section_keys_unique" not in done.stderr, done.stderr[-3000:]
