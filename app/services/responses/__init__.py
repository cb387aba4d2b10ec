"""The Responses API: the request conversion, items, tools, the reasoning seal, the
service, its wire shapes and what a deferred run of it needs."""
