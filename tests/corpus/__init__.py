"""Inputs shared by several kinds of tests: adversarial request bytes (`adversarial`)
and the CPU-time growth check the complexity tests use (`growth`)."""
