"""The pool and its units, in plain Python: claims, releases, generations, quarantine.

The stages here are FAKE stages written for each case (a stage that is slow to
reset, one that keeps talking after its session ended, one that hangs, one
that raises); the loopback pool is used where ordinary stages will do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pipelines.messages import Downstream, Message, Outbound, PipelineError
from pipelines.pool import PipelinePool
from pipelines.stages.base import SessionContext, Stage
from pipelines.unit import PipelineUnit, UnitState
from tests.conftest import make_loopback_pool


@dataclass(frozen=True)
class Ping(Downstream):
    n: int
    action: str = "echo"  # echo | raise | block | linger


@dataclass(frozen=True)
class Pong(Outbound):
    n: int
    stage: str


class Sink:
    """Collects what a session receives, from any thread."""

    def __init__(self) -> None:
        self.got: list[Outbound] = []
        self._changed = threading.Condition()

    def __call__(self, out: Outbound) -> None:
        with self._changed:
            self.got.append(out)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Outbound]], bool], timeout: float = 5.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.got), timeout)


class FakeStage(Stage):
    """A FAKE stage: answers a Ping with a Pong and passes it on; other actions misbehave on purpose."""

    def __init__(
        self,
        context: SessionContext,
        name: str,
        log: list[str],
        reset_s: float = 0.0,
        release: threading.Event | None = None,
    ) -> None:
        super().__init__(context)
        self.name = name
        self.log = log
        self.reset_s = reset_s
        self.release = release or threading.Event()
        self.blocked = threading.Event()

    def process(self, msg: Downstream) -> Iterator[Message]:
        if isinstance(msg, Ping) and msg.action == "raise" and self.name == "b":
            raise ValueError("fake failure")
        if isinstance(msg, Ping) and msg.action == "block" and self.name == "b":
            self.blocked.set()
            self.release.wait(30)  # hangs past the release timeout, then finishes its old work
            yield Pong(generation=msg.generation, n=msg.n, stage=self.name)
            return
        if isinstance(msg, Ping) and msg.action == "linger" and self.name == "b":
            threading.Thread(target=self._linger, args=(msg,), daemon=True).start()
        if isinstance(msg, Ping):
            yield Pong(generation=msg.generation, n=msg.n, stage=self.name)
        yield msg

    def _linger(self, msg: Ping) -> None:
        """Keeps emitting output of its (old) session for a while, as a slow engine callback would."""
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline and not self.release.is_set():
            self.unit.emit(Pong(generation=msg.generation, n=-1, stage="lingering"))
            time.sleep(0.005)

    def on_session_end(self) -> None:
        time.sleep(self.reset_s)
        self.log.append(f"{self.name} reset")


def fake_unit(
    log: list[str], reset_s: float = 0.0, release_timeout_s: float = 5.0, release: threading.Event | None = None
) -> tuple[PipelineUnit, list[list[FakeStage]]]:
    builds: list[list[FakeStage]] = []

    def build(context: SessionContext) -> list[Stage]:
        stages = [FakeStage(context, name, log, reset_s, release) for name in ("a", "b", "c")]
        builds.append(stages)
        return stages

    unit = PipelineUnit(0, build, release_timeout_s=release_timeout_s)
    for stage in builds[0]:
        stage.unit = unit
    return unit, builds


def started_pool(unit: PipelineUnit) -> PipelinePool:
    pool = PipelinePool([unit])
    pool.start()
    return pool


def test_claims_are_atomic_under_many_threads():
    pool = make_loopback_pool(3)
    try:
        barrier = threading.Barrier(40)
        leases = []
        lock = threading.Lock()

        def claim(i: int) -> None:
            barrier.wait(5)
            lease = pool.claim(lambda out: None, f"sess_{i}")
            if lease is not None:
                with lock:
                    leases.append(lease)

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(leases) == 3
        assert len({id(lease.unit) for lease in leases}) == 3
        assert pool.rejections == 37
        assert pool.free_units() == 0
        assert {u.session_id for u in pool.units} == {lease.session_id for lease in leases}
        for lease in leases:
            assert pool.release(lease).result(10) is True
        assert pool.free_units() == 3
    finally:
        pool.shutdown()


def test_release_waits_until_every_stage_has_acknowledged_the_session_end():
    log: list[str] = []
    unit, _ = fake_unit(log, reset_s=0.15)
    pool = started_pool(unit)
    try:
        lease = pool.claim(Sink(), "sess_1")
        assert lease is not None
        started = time.monotonic()
        future = pool.release(lease)
        deadline = time.monotonic() + 5
        while not log and time.monotonic() < deadline:  # stage a has reset; b and c are still at it
            time.sleep(0.005)
        assert unit.state is UnitState.DRAINING and not future.done()
        assert pool.claim(Sink(), "sess_2") is None  # not claimable while it drains
        assert future.result(5) is True
        assert time.monotonic() - started >= 0.45  # three stages, one after the other
        assert log == ["a reset", "b reset", "c reset"]
        assert unit.state is UnitState.IDLE and pool.free_units() == 1
    finally:
        pool.shutdown()


def test_output_of_an_ended_session_never_reaches_the_next_session():
    log: list[str] = []
    unit, builds = fake_unit(log)
    pool = started_pool(unit)
    try:
        first = Sink()
        lease = pool.claim(first, "sess_1")
        assert lease is not None
        unit.submit(Ping(generation=lease.generation, n=1, action="linger"))
        assert first.wait_for(lambda got: any(isinstance(o, Pong) and o.stage == "lingering" for o in got))
        assert pool.release(lease).result(5) is True

        second = Sink()
        lease2 = pool.claim(second, "sess_2")
        assert lease2 is not None and lease2.unit is unit and lease2.generation != lease.generation
        unit.submit(Ping(generation=lease2.generation, n=2))
        assert second.wait_for(lambda got: len(got) == 3)
        time.sleep(0.7)  # the lingering thread goes on emitting for 0.6 s after it started
        assert [(o.n, o.stage) for o in second.got] == [(2, "a"), (2, "b"), (2, "c")]
        # A message stamped with the old generation is not even taken in.
        unit.submit(Ping(generation=lease.generation, n=3))
        time.sleep(0.1)
        assert len(second.got) == 3
        pool.release(lease2).result(5)
    finally:
        for stage in builds[0]:
            stage.release.set()
        pool.shutdown()


def test_a_unit_that_does_not_drain_in_time_is_quarantined_rebuilt_and_serves_the_next_session_cleanly(caplog):
    log: list[str] = []
    hang = threading.Event()
    unit, builds = fake_unit(log, release_timeout_s=0.3, release=hang)
    pool = started_pool(unit)
    try:
        first = Sink()
        lease = pool.claim(first, "sess_1")
        assert lease is not None
        unit.submit(Ping(generation=lease.generation, n=1, action="block"))
        assert builds[0][1].blocked.wait(5)  # stage a answered; stage b hangs
        assert first.wait_for(lambda got: len(got) == 1)
        old_threads = [t for t in threading.enumerate() if t.name == "unit0-b"]
        started = time.monotonic()
        assert pool.release(lease).result(10) is False
        assert 0.3 <= time.monotonic() - started < 5
        assert unit.rebuilds == 1 and len(builds) == 2
        assert unit.state is UnitState.IDLE
        assert "quarantined" in caplog.text

        second = Sink()
        lease2 = pool.claim(second, "sess_2")
        assert lease2 is not None
        for stage in builds[1]:
            stage.unit = unit
        unit.submit(Ping(generation=lease2.generation, n=2))
        assert second.wait_for(lambda got: len(got) == 3)
        hang.set()  # the old stage b finishes its old work now: its output must go nowhere
        for thread in old_threads:
            thread.join(5)
        time.sleep(0.1)
        assert [(o.n, o.stage) for o in second.got] == [(2, "a"), (2, "b"), (2, "c")]
        assert unit.healthy()
        assert pool.release(lease2).result(5) is True
        assert unit.rebuilds == 1
    finally:
        hang.set()
        pool.shutdown()


def test_a_stage_exception_becomes_a_pipeline_error_and_the_stage_thread_keeps_working(caplog):
    log: list[str] = []
    unit, _ = fake_unit(log)
    pool = started_pool(unit)
    try:
        sink = Sink()
        lease = pool.claim(sink, "sess_1")
        assert lease is not None
        unit.submit(Ping(generation=lease.generation, n=1, action="raise"))
        assert sink.wait_for(lambda got: any(isinstance(o, PipelineError) for o in got))
        error = next(o for o in sink.got if isinstance(o, PipelineError))
        assert (error.code, error.stage, error.generation) == ("stage_error", "b", lease.generation)
        assert "ValueError: fake failure" in error.message
        assert "b failed" in caplog.text
        unit.submit(Ping(generation=lease.generation, n=2))
        assert sink.wait_for(lambda got: sum(isinstance(o, Pong) and o.n == 2 for o in got) == 3)
        assert unit.healthy()
        assert pool.release(lease).result(5) is True
        assert unit.rebuilds == 0
    finally:
        pool.shutdown()


@pytest.mark.parametrize("size", [1, 2])
def test_a_released_unit_is_claimable_again(size):
    pool = make_loopback_pool(size)
    try:
        leases = [pool.claim(lambda out: None, f"sess_{i}") for i in range(size)]
        assert all(leases) and pool.claim(lambda out: None, "one_too_many") is None
        pool.release(leases[0]).result(5)
        again = pool.claim(lambda out: None, "sess_again")
        assert again is not None and again.unit is leases[0].unit
        assert again.unit.sessions_served >= 2
    finally:
        pool.shutdown()


async def test_a_release_whose_waiter_is_cancelled_still_frees_the_unit_and_raises_in_no_thread():
    """``SessionCore.end`` awaits the release; a session ended while it is being cancelled (a disconnect during
    shutdown) cancels that wait. The release goes on, and its thread must not die setting the cancelled result."""
    import asyncio

    log: list[str] = []
    unit, _ = fake_unit(log, reset_s=0.3)
    pool = started_pool(unit)
    died: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: died.append(args.exc_value)
    try:
        lease = pool.claim(Sink(), "sess_1")
        assert lease is not None
        future = pool.release(lease)
        waiter = asyncio.ensure_future(asyncio.wrap_future(future))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not future.cancelled()  # the release itself cannot be called off
        assert await asyncio.wait_for(asyncio.wrap_future(future), 5) is True
        assert unit.state is UnitState.IDLE and pool.free_units() == 1
        await asyncio.sleep(0.1)  # the release thread has returned
        assert died == []
    finally:
        threading.excepthook = previous
        pool.shutdown()


def test_a_release_whose_waiter_was_cancelled_frees_the_unit_without_an_error_in_its_thread(monkeypatch):
    """A call's finishing task cancelled while it awaited the release (another path closed the call) cancels
    the release's future; the release thread used to die on it with InvalidStateError and a traceback."""
    died: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook_args: died.append(hook_args.exc_value))
    pool = make_loopback_pool(1)
    try:
        lease = pool.claim(lambda out: None, "sess_cancelled")
        assert lease is not None
        future = pool.release(lease)
        future.cancel()
        deadline = time.monotonic() + 5
        while pool.free_units() != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert pool.free_units() == 1 and died == []
    finally:
        pool.shutdown()


def test_freeing_is_none_for_a_full_pool_and_resolves_when_a_draining_unit_comes_back():
    pool = make_loopback_pool(1)
    try:
        assert pool.freeing().done()  # a unit is free: at once
        lease = pool.claim(lambda out: None, "sess_a")
        assert lease is not None and pool.full() and pool.freeing() is None  # busy, none draining: refuse at once
        assert pool.claim(lambda out: None, "sess_b", count_refusal=False) is None and pool.rejections == 0
        released = pool.release(lease)
        waiting = pool.freeing()  # draining now, or already back
        assert waiting is not None and not pool.full()
        assert waiting.result(10) is None and released.result(10) is True
        assert pool.claim(lambda out: None, "sess_b") is not None
    finally:
        pool.shutdown()
