"""Usage records and their writer: the records, the group-commit writer (its own process on
SQLite, its window, its inserts), the spool and dead-letter file, the refusals and
faults it counts, and keys' last use."""
