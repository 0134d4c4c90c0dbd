"""What deltalog promises under hostile input, SIGKILLs and concurrency, tried for real and measured.

* :mod:`tooling.reliability.hostile`: hypothesis strategies for every kind of bad input a caller can hand
  the API or the CLI (topic names, configs, records, partitions and offsets, store paths, command lines),
  and the check that each is refused with a :class:`~deltalog.errors.DeltalogError` that says what was wrong,
  leaving every file byte-for-byte as it was and creating nothing anywhere.
* :mod:`tooling.reliability.harness`: real processes (producers, cleaner runs through each entry point)
  killed with SIGKILL at random moments and at each Delta commit boundary
  (:mod:`deltalog.log.faults`), two cleaner jobs and several producers running together, and the store
  verified afterwards against an independent model built from what producers were told
  (:mod:`tooling.reliability.model`).
* ``python -m tooling.reliability`` runs both and writes ``docs/RELIABILITY.md``.

The tests (``tests/test_hostile_input.py``, ``tests/test_crash_harness.py``) run the same code at a smaller
size. Needs the ``dev`` extra (hypothesis).
"""
