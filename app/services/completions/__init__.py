"""Completions: the service."""
