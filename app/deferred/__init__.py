"""Durable deferred work: jobs of many lines, run in the background on spare capacity.

A job has a kind (`batch`, ...) and a payload; its lines are claimed under a lease by
whichever replica has room, run by the kind's handler, and answered (result, state
and usage row) in one transaction, so a line is answered and billed exactly once."""
