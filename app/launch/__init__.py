"""Starting the server: the `lilac-serve` command, the served models' engines, the engine's
own process, `--api-server-count`'s workers and their shared engine core, and the
collector's settings at start."""
