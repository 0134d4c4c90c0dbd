"""The README stays true: its two set-up commands, its generated config tables, and its Python tour runs."""

from __future__ import annotations

import os
import re

from deltalog.cli.report import render_readme

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_the_two_set_up_commands_and_ci():
    text = readme()
    assert '```bash\npip install -e ".[spark]" && deltalog demo\n```' in text  # the demo needs the Spark extra
    [test_command] = re.findall(r'```bash\n(pip install -e "\.\[dev\]" && python -m pytest.*)\n```', text)
    assert test_command == 'pip install -e ".[dev]" && python -m pytest -m ""'  # -m "": the whole suite
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert test_command in f.read().splitlines()  # CI runs the README's command, verbatim


def test_generated_config_tables_are_up_to_date():
    text = readme()
    assert "<!-- BEGIN topic-configs -->" in text and "<!-- BEGIN store-configs -->" in text
    assert render_readme(text) == text, "run: python -m deltalog.cli.report README.md"


def test_the_python_tour_runs(tmp_path, capsys):
    text = readme()
    section = text.split("## A tour of the Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"/tmp/my-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "README.md (Python tour)", "exec"), namespace)
    assert namespace["offsets"] == [0, 1, 2]
    assert [r.offset for r in namespace["records"]] == [0, 1, 2]
    assert namespace["state"].log_end_offset == 3
    assert namespace["store"].topic_config("fruit-prices").min_cleanable_dirty_ratio == 0.1
    assert namespace["placed"] == [(1, 0), (0, 0)]  # grape -> 1, lime -> 0: Kafka's partitioner
    assert [r.key for r in namespace["store"].read("prices", 0)] == [b"lime", b"kiwi"]


def test_the_transactions_example_runs(tmp_path):
    section = readme().split("## Transactions", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"/tmp/my-transactional-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "README.md (Transactions)", "exec"), namespace)
    assert [(r.offset, r.key, r.value) for r in namespace["totals"]] == [(0, b"apples", b"3")]
    committed = namespace["store"].consumer(group_id="order-totals-app").committed(
        namespace["TopicPartition"]("orders-in", 0))
    assert committed == 42
