"""The Batch API: the input check at upload, validation, the jobs, each line's run, the
service and the setup."""
