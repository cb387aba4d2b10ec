"""The tenant database: its engine (opening, migrating), every table, the migrations,
and what every SQLite connection sets. Light on purpose: the usage writer's child
process imports `app.db.sqlite` alone."""
