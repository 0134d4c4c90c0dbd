"""Spark: the embedded session (:mod:`~deltalog.sql.session`), the Python data source that reads partition
tables (:mod:`~deltalog.sql.source`), reads of partition snapshots (:mod:`~deltalog.sql.reads`) and the SQL
views over the log and the current state (:mod:`~deltalog.sql.views`)."""
