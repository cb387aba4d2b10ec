"""Background responses: the service, their runs as deferred work, their recorded events,
and the setup."""
