"""A topic's state table: one row per live key, beside the log, kept up to date incrementally (docs/state-table.md).

``rows`` turns log records into state rows; ``table`` owns the Delta table and what its commits record;
``refresh`` applies the new records in one merge; ``equality`` proves the table equals the log; ``increment`` proves
one refresh's commit right from what it changed; ``lag`` says how far behind it is.
"""
