"""Shared warm endpoints: several models in one server, each asleep until a request
names it (`pool.ModelPool`), put to sleep and woken through one small interface
(`sleeper.Sleeper`: vLLM's sleep mode on a GPU, a pause on the CPU)."""
