"""Prices of the served models and the cost of each usage row: the arithmetic
(`money`), the store with its in-memory book (`store`), seeding from `--price`
(`seeds`) and the `lilac-serve prices` command (`cli`)."""
