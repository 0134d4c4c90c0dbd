"""deltalog's benchmark harness: the cleaner side by side with what users would do instead.

Run ``python -m benchmarks --preset small`` (needs the ``bench`` extra: ``pip install -e ".[bench]"``);
results go to ``docs/benchmarks.md`` and ``docs/benchmarks.png``. Not collected by pytest (``testpaths``
is ``tests``).
"""
