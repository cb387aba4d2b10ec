"""The calls each sleeper makes on a model's engine, recorded in order."""

from __future__ import annotations

from engine.warm.sleeper import PauseSleeper, VLLMSleeper


class RecordingHost:
    def __init__(self, releases: bool = True) -> None:
        self.calls: list[str] = []
        self.releases = releases

    async def pause(self) -> None:
        self.calls.append("pause")

    async def resume(self) -> None:
        self.calls.append("resume")

    async def release_memory(self) -> bool:
        self.calls.append("release_memory")
        return self.releases

    async def reacquire_memory(self) -> None:
        self.calls.append("reacquire_memory")


async def test_pause_sleeper_pauses_and_resumes_and_keeps_memory() -> None:
    host = RecordingHost()
    sleeper = PauseSleeper()
    await sleeper.sleep(host)
    assert host.calls == ["pause"]
    await sleeper.wake(host)
    assert host.calls == ["pause", "resume"]


async def test_vllm_sleeper_sleeps_level_one_after_pausing_and_wakes_before_resuming() -> None:
    host = RecordingHost()
    sleeper = VLLMSleeper()
    await sleeper.sleep(host)
    assert host.calls == ["pause", "release_memory"]
    await sleeper.wake(host)
    assert host.calls == ["pause", "release_memory", "reacquire_memory", "resume"]


async def test_vllm_sleeper_skips_the_wake_up_of_an_engine_without_sleep_mode() -> None:
    host = RecordingHost(releases=False)
    sleeper = VLLMSleeper()
    await sleeper.sleep(host)
    await sleeper.wake(host)
    assert host.calls == ["pause", "release_memory", "resume"]
