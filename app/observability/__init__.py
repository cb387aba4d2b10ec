"""What an operator sees of a running server: request ids and the per-request record
(`context`), log formatting (`logs`), Prometheus metrics (`metrics`) and the ASGI layer
that ties them to every HTTP request (`middleware`)."""
