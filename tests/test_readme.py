"""The README and the docs/ pages stay true: the two set-up commands, the generated config tables, every
example they run, and the README's links into docs/."""

from __future__ import annotations

import os
import re

import pytest

from deltalog.cli.report import render_readme

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def page(path: str = "README.md") -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def readme() -> str:
    return page()


def first_python_block(text: str, after: str) -> str:
    """The first ```python block after the heading ``after`` (a page's title or one of its sections)."""
    return re.search(r"```python\n(.*?)```", text.split(after, 1)[1], re.S).group(1)


def test_the_two_set_up_commands_and_ci():
    text = readme()
    assert '```bash\npip install -e ".[spark]" && deltalog demo\n```' in text  # the demo needs the Spark extra
    [test_command] = re.findall(r'```bash\n(pip install -e "\.\[dev\]" && python -m pytest.*)\n```', text)
    assert test_command == 'pip install -e ".[dev]" && python -m pytest -m ""'  # -m "": the whole suite
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert test_command in f.read().splitlines()  # CI runs the README's command, verbatim


def test_the_readme_links_into_docs_resolve():
    """Every page the README links to exists, and every #anchor names a heading of it (GitHub's slugs)."""
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#([^)\s]+))?\)", readme())
    assert len({path for path, _ in links}) >= 12  # the front page links every topic page
    for path, anchor in links:
        assert os.path.isfile(os.path.join(ROOT, path)), f"README links to {path}, which does not exist"
        if anchor and path.endswith(".md"):
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.+)$", page(path), re.M)}
            assert anchor in slugs, f"README links to {path}#{anchor}, which has no such heading"


def test_every_docs_page_is_linked_from_the_readme():
    text = readme()
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            assert f"](docs/{name}" in text, f"docs/{name} is not linked from the README"


def test_generated_config_tables_are_up_to_date():
    text = page("docs/configs.md")
    assert "<!-- BEGIN topic-configs -->" in text and "<!-- BEGIN store-configs -->" in text
    assert render_readme(text) == text, "run: python -m deltalog.cli.report docs/configs.md"


def test_the_readme_tour_runs(tmp_path, spark):
    code = first_python_block(readme(), "## A short tour")
    code = code.replace('Store("/tmp/my-store")', f"Store({str(tmp_path / 'store')!r}, spark=spark)")
    namespace: dict = {"spark": spark}
    exec(compile(code, "README.md (A short tour)", "exec"), namespace)
    assert namespace["latest"] == {b"lime": b"0.49", b"grape": b"2.75"}
    assert [(r.topic, r.partition, r.end_offset) for r in namespace["results"]] == [("fruit-prices", 0, 3)]
    assert [r.offset for r in namespace["store"].read("fruit-prices", 0)] == [1, 2]  # offsets never change


def test_the_python_tour_runs(tmp_path, capsys):
    code = first_python_block(page("docs/python-api.md"), "# A tour of the Python API")
    code = code.replace('"/tmp/my-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "docs/python-api.md (Python tour)", "exec"), namespace)
    assert namespace["offsets"] == [0, 1, 2]
    assert [r.offset for r in namespace["records"]] == [0, 1, 2]
    assert namespace["state"].log_end_offset == 3
    assert namespace["store"].topic_config("fruit-prices").min_cleanable_dirty_ratio == 0.1
    assert namespace["placed"] == [(1, 0), (0, 0)]  # grape -> 1, lime -> 0: Kafka's partitioner
    assert [r.key for r in namespace["store"].read("prices", 0)] == [b"lime", b"kiwi"]


def test_the_transactions_example_runs(tmp_path):
    code = first_python_block(page("docs/transactions.md"), "## Transactions")
    code = code.replace('"/tmp/my-transactional-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "docs/transactions.md (Transactions)", "exec"), namespace)
    assert [(r.offset, r.key, r.value) for r in namespace["totals"]] == [(0, b"apples", b"3")]
    committed = namespace["store"].consumer(group_id="order-totals-app").committed(
        namespace["TopicPartition"]("orders-in", 0))
    assert committed == 42


@pytest.mark.subprocess
def test_the_readme_kafka_quickstart_runs(tmp_path):
    """The README's kcat quickstart, run as a user runs it (bash, in a fresh directory) on a free port: kcat lists,
    produces and consumes through ``deltalog serve``, the usual cleaner pass compacts, ``kill %1`` stops it."""
    import sys

    from tooling.services import ensure_kcat, free_port, run_in_session

    ensure_kcat()
    block = re.search(r"```bash\n(.*?)```", readme().split("## A Kafka quickstart with kcat", 1)[1], re.S).group(1)
    port = free_port()
    script = "\n".join(line for line in block.splitlines() if not line.startswith("pip install"))
    script = script.replace("deltalog serve &", f"deltalog serve --listen 127.0.0.1:{port} &")
    script = script.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
    bindir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    assert "deltalog ping 127.0.0.1:" in script  # nothing talks to the endpoint before it answers
    # in a session of its own: whatever the script left running (`deltalog serve &`) ends with the test, even when
    # the script fails or times out
    done = run_in_session(["bash", "-e", "-c", "set -m\n" + script + "\nwait"], cwd=tmp_path, env=env,
                          timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'topic "changes" with 1 partitions' in done.stdout
    consumed = [line for line in done.stdout.splitlines() if " @" in line and "=" in line]
    assert consumed == ["user2=bob @1", "user1=alice2 @2", "user3=carol @3"]
    assert "deltalog serve: stopped" in done.stdout + done.stderr


def test_the_testing_index_names_every_test_file():
    """docs/testing.md maps each test file to the package it covers; a file without a row, or a row naming no
    file, makes the index untrue."""
    import re

    with open(os.path.join(ROOT, "docs", "testing.md")) as f:
        section = f.read().split("## Which tests cover which package", 1)[1]
    listed = set(re.findall(r"`(test_\w+\.py)`", section))
    files = {name for name in os.listdir(os.path.join(ROOT, "tests")) if re.fullmatch(r"test_\w+\.py", name)}
    assert sorted(files - listed) == [] and sorted(listed - files) == []
