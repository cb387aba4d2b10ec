"""Reading what clients send and framing what they get: request bodies (content type, size,
nesting depth), multipart uploads, and SSE frames."""
