"""Chat Completions: the service, its wire shapes and its stream frames."""
