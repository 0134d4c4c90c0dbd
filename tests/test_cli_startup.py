"""The command line starts with what the command uses: ``deltalog --help`` imports no command module, no store and
no pyarrow; a store-only command imports neither Spark nor the cleaner nor DuckDB; shell completion answers from
the command on the line. Each run is the CLI as a process, as a user starts it (``benchmarks/cli_startup.py``
times the same runs; this file checks what they load, which does not depend on the machine's load)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deltalog.cli import COMMANDS, build_parser

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("DELTALOG_STORE", None)
    return env


def imported_by(*argv: str, cwd: Path) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules ``python -m deltalog ARGV`` imports, from ``-X importtime`` (the process as a user runs it)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "deltalog", *argv], capture_output=True,
                          text=True, cwd=cwd, env=_env(), timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return modules, done


def test_the_command_table_is_what_the_modules_register():
    """``deltalog --help`` lists the commands from :data:`COMMANDS` without importing their modules: each line
    must be the one the module registers, in the same order."""
    parser = build_parser()  # every module registered
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = [(a.dest, a.help) for a in sub._choices_actions]
    assert registered == [(name, help_line) for name, (_, help_line) in COMMANDS.items()]


def test_help_imports_no_command_module_and_no_store(tmp_path):
    modules, done = imported_by("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "topics" in done.stdout and "completion" in done.stdout
    heavy = {"pyarrow", "numpy", "deltalake", "deltalog.store", "deltalog.log.record", "pyspark", "duckdb"}
    assert not modules & heavy, sorted(modules & heavy)
    command_modules = {f"deltalog.cli.{m}" for m, _ in COMMANDS.values()}
    assert not modules & command_modules, sorted(modules & command_modules)


def test_a_command_help_imports_only_its_module(tmp_path):
    modules, done = imported_by("consume", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--from-beginning" in done.stdout
    assert "deltalog.cli.consume" in modules
    others = {f"deltalog.cli.{m}" for m, _ in COMMANDS.values()} - {"deltalog.cli.consume"}
    assert not modules & others, sorted(modules & others)


def test_global_options_are_documented_once(tmp_path):
    """A command's help names the global options in one line instead of repeating their text."""
    done = subprocess.run([sys.executable, "-m", "deltalog", "topics", "list", "--help"], capture_output=True,
                          text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert done.returncode == 0
    assert "credentials and endpoints" not in done.stdout  # --store's paragraph: in `deltalog --help` only
    assert "Global options (--store" in done.stdout
    top = subprocess.run([sys.executable, "-m", "deltalog", "--help"], capture_output=True, text=True,
                         cwd=tmp_path, env=_env(), timeout=120)
    assert "credentials and endpoints" in top.stdout


def test_a_store_only_command_imports_neither_spark_nor_the_cleaner(tmp_path):
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-m", "deltalog", "--store", str(store), "topics", "create", "t"], check=True,
                   capture_output=True, cwd=tmp_path, env=_env(), timeout=120)
    for argv in (["topics", "list"], ["topics", "describe", "t"], ["consume", "t", "--from-beginning"]):
        modules, done = imported_by("--store", str(store), *argv, cwd=tmp_path)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        loaded = {m for m in modules if m.split(".")[0] in ("pyspark", "duckdb", "great_expectations")}
        loaded |= modules & {"deltalog.cleaner.cleaner", "deltalog.cleaner.log_cleaner", "deltalog.cleaner.metrics"}
        assert not loaded, (argv, sorted(loaded))


def test_the_cleaner_jobs_help_imports_no_store_and_no_spark(tmp_path):
    """``deltalog-cleaner --help`` (the job's entry point) answers as fast as ``deltalog --help``: the store, Spark's
    session and what they pull in (pyarrow, numpy, delta-rs) are imported when a run starts, not to print the help."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "deltalog.jobs.cleaner_job", "--help"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--once" in done.stdout and "--config" in done.stdout
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = {"pyarrow", "numpy", "deltalake", "deltalog.store", "deltalog.sql.session", "pyspark", "duckdb"}
    assert not modules & heavy, sorted(modules & heavy)


def test_errors_under_json_output_are_json(tmp_path):
    import json

    done = subprocess.run([sys.executable, "-m", "deltalog", "-o", "json", "--store", str(tmp_path / "none"),
                           "topics", "describe", "t"], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                          timeout=120)
    assert done.returncode == 1
    error = json.loads(done.stderr.strip().splitlines()[-1])
    assert error["exit_code"] == 1 and "no deltalog store" in error["error"] and error["type"] == "NoStoreError"


def _complete(line: str, tmp_path: Path) -> list[str]:
    """What ``deltalog`` answers bash's completion of ``line`` (the cursor at its end), through argcomplete's
    protocol as the script ``deltalog completion bash`` drives it."""
    out = tmp_path / "completions"
    env = _env(_ARGCOMPLETE="1", _ARGCOMPLETE_SHELL="bash", COMP_LINE=line, COMP_POINT=str(len(line)),
               COMP_TYPE="9", _ARGCOMPLETE_STDOUT_FILENAME=str(out), _ARGCOMPLETE_IFS="\n")
    done = subprocess.run([sys.executable, "-m", "deltalog"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [w.strip() for w in out.read_text().split("\n") if w.strip()]


def test_completion_completes_commands_subcommands_and_options(tmp_path):
    assert "topics" in _complete("deltalog top", tmp_path)
    assert "consumer-groups" in _complete("deltalog cons", tmp_path)
    assert "create" in _complete("deltalog topics cr", tmp_path)
    assert "--from-beginning" in _complete("deltalog consume --from-b", tmp_path)
    assert "--store" in _complete("deltalog --st", tmp_path)


def test_the_completion_script_completes_in_bash(tmp_path):
    """``eval "$(deltalog completion bash)"`` then a Tab: bash's own completion function asks ``deltalog``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "deltalog").write_text(f"#!/bin/sh\nexec {sys.executable} -m deltalog \"$@\"\n")
    (bin_dir / "deltalog").chmod(0o755)
    script = ('eval "$(deltalog completion bash)"; COMP_WORDS=(deltalog topics c); COMP_CWORD=2; '
              'COMP_LINE="deltalog topics c"; COMP_POINT=${#COMP_LINE}; _python_argcomplete deltalog; '
              'echo "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"))
    assert done.returncode == 0, done.stderr
    assert "create" in done.stdout.split()
