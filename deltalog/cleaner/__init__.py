"""The log cleaner: what Kafka's LogCleaner, LogCleanerManager and Cleaner own.

Policy (:mod:`~deltalog.cleaner.log_to_clean`, :mod:`~deltalog.cleaner.cleaner_manager`: which partition,
which offsets), mechanism (:mod:`~deltalog.cleaner.cleaner`: one pass; :mod:`~deltalog.cleaner.offset_map`
and :mod:`~deltalog.cleaner.recopy`: its two Spark passes) and orchestration
(:mod:`~deltalog.cleaner.log_cleaner`: the one cleaning loop, with the uncleanable set and metrics).

Spark's Python workers import the pass modules of this package, so this file imports nothing.
"""
