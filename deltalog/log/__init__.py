"""The log: what Kafka's LogManager and UnifiedLog own.

Records and their Arrow schema (:mod:`~deltalog.log.record`, :mod:`~deltalog.log.arrow_records`,
:mod:`~deltalog.log.encoding`), the Delta edge (:mod:`~deltalog.log.delta`), segments, the partition log
(:mod:`~deltalog.log.partition_log`), the registry of topics and partitions
(:mod:`~deltalog.log.log_manager`), partition leases, retention and VACUUM.

This package imports nothing above it (the producer clients, groups, the cleaner, SQL, quality, the Store). It is
imported by Spark's Python workers (the cleaner's tasks read records with :mod:`~deltalog.log.record`), so this file
imports nothing.
"""
