"""Anthropic's Messages API: the request conversion, the service and its wire shapes."""
