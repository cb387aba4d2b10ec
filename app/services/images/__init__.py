"""Images in requests: fetching (addresses), decoding, the byte budget and the service."""
