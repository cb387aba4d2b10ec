"""The fault and soak harness: mixed traffic against a real server, faults injected."""
