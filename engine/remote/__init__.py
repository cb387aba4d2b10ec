"""An engine run in a process of its own beside the HTTP process (`RemoteEngine`):
prompt rendering, tokenization and the engine's output handling happen there, and the
HTTP process receives finished deltas, one frame per engine step."""
