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
* :mod:`tooling.reliability.attacks` and its classes (:mod:`~tooling.reliability.state_attacks`,
  :mod:`~tooling.reliability.clock_attacks`, :mod:`~tooling.reliability.disk_attacks`,
  :mod:`~tooling.reliability.store_fault_attacks`, :mod:`~tooling.reliability.writer_clock_attacks`; run in
  series by :mod:`~tooling.reliability.attack_runs`, reported by :mod:`~tooling.reliability.attack_report`):
  documents outside the Delta logs damaged or lost, a producer's clock a day off, a full disk, an object store's
  failed answers, and writers whose clocks disagree under time travel, judged by the same model.
* ``python -m tooling.reliability`` runs them all and writes ``docs/RELIABILITY.md``.

The tests (``tests/test_hostile_input.py``, ``tests/test_crash_harness.py``, ``tests/test_attack_harness.py``)
run the same code at a smaller
size. Needs the ``dev`` extra (hypothesis).
"""
