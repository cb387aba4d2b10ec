"""The admin API under /admin/: admission (the controller's operator routes and the guard
on the admin key), keys, models, fairness and batches."""
