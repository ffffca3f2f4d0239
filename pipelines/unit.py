"""A pipeline unit: its stages, one worker thread each, the queues between them."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

from pipelines import cpu
from pipelines.messages import (
    AudioOut,
    Downstream,
    Outbound,
    PipelineError,
    SessionEnd,
    Shutdown,
    TextDelta,
    UnitFailed,
)
from pipelines.stages.base import SessionContext, Stage

logger = logging.getLogger(__name__)

# The stages whose work takes a core for a while (the VAD's frames do not): counted by ``cpu.current()``.
COMPUTE_STAGES = frozenset({"stt", "lm", "tts"})

Sink = Callable[[Outbound], None]
StageFactory = Callable[[SessionContext], Sequence[Stage]]


class UnitState(str, enum.Enum):  # noqa: UP042  (str() of a member is its name, as logged)
    WARMING = "warming"
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"
    QUARANTINED = "quarantined"


class UnitSnapshot(TypedDict):
    """One unit as the slot board, the heartbeat and ``/metrics`` read it."""

    index: int
    state: str
    session_id: str | None
    since: float
    sessions_served: int
    rebuilds: int
    last_rebuild: str | None  # why the unit's threads were last rebuilt, in words
    activity: str  # a busy unit: "answering" (a response or its audio under way) or "listening"; else ""


def _has_mail(inbox: queue.Queue[Downstream]) -> bool:
    return not inbox.empty()


class _Wiring:
    """One set of stages, queues and threads. A quarantined unit gets a new one."""

    def __init__(self, unit: PipelineUnit, stages: Sequence[Stage], queue_size: int) -> None:
        self.unit = unit
        self.stages = list(stages)
        self.queues: list[queue.Queue[Downstream]] = [queue.Queue(maxsize=queue_size) for _ in self.stages]
        for stage, inbox in zip(self.stages, self.queues):
            stage.later = inbox.put
            stage.waiting = functools.partial(_has_mail, inbox)
        self.acks = [threading.Event() for _ in self.stages]
        self.ready = [threading.Event() for _ in self.stages]
        self.retired = False
        self.dead: list[str] = []
        # What each stage thread is doing now (the message's kind and since when), to say what held up a drain.
        self.working: list[tuple[str, float] | None] = [None] * len(self.stages)
        self.threads = [
            threading.Thread(target=self._run, args=(i,), name=f"unit{unit.index}-{stage.name}", daemon=True)
            for i, stage in enumerate(self.stages)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _forward(self, index: int, msg: Downstream) -> None:
        if index + 1 < len(self.queues):
            self.queues[index + 1].put(msg)

    def _run(self, index: int) -> None:
        """The stage thread. Should it die all the same, the session is told and the unit is marked unhealthy."""
        try:
            self._serve(index)
        except BaseException as exc:  # noqa: BLE001 (the thread ends here either way; say why)
            name = self.stages[index].name
            logger.critical("unit %s: the %s thread died: %s: %s", self.unit.index, name, type(exc).__name__, exc)
            self.dead.append(name)
            if not self.retired:
                self.unit.stage_died(name, f"{name} thread died: {type(exc).__name__}: {exc}")

    def _serve(self, index: int) -> None:
        stage = self.stages[index]
        context = self.unit.context
        try:
            stage.setup()
        except Exception:
            logger.exception("unit %s: %s failed to set up", self.unit.index, stage.name)
            self.dead.append(stage.name)
            return
        finally:
            self.ready[index].set()
        inbox = self.queues[index]
        while True:
            msg = inbox.get()
            if isinstance(msg, Shutdown):
                break
            if isinstance(msg, SessionEnd):
                try:
                    stage.on_session_end()
                except Exception:
                    logger.exception("unit %s: %s failed to reset", self.unit.index, stage.name)
                    continue  # no ack: the unit will be quarantined and rebuilt
                self.acks[index].set()
                self._forward(index, msg)
                continue
            if self.retired or not context.is_current(msg.generation):
                continue
            if msg.timeline is not None:
                msg.timeline.mark(f"{stage.name}_start")
            self.working[index] = (type(msg).__name__, time.monotonic())
            try:
                computes = stage.name in COMPUTE_STAGES
                with (
                    cpu.current().busy() if computes else contextlib.nullcontext(),
                    cpu.serving(context.urgency(msg) if computes else None, owner=context),
                ):
                    for out in stage.process(msg):
                        if isinstance(out, Outbound):
                            self.unit.emit(out)
                        elif not self.retired:
                            self._forward(index, out)
            except Exception as exc:
                logger.exception("unit %s: %s failed", self.unit.index, stage.name)
                self.unit.emit(
                    PipelineError(
                        generation=msg.generation,
                        turn=msg.turn,
                        code="stage_error",
                        message=f"{stage.name} failed: {type(exc).__name__}: {exc}",
                        stage=stage.name,
                        response_id=getattr(msg, "response_id", None),
                    )
                )
            finally:
                self.working[index] = None
        try:
            stage.cleanup()
        except Exception:
            logger.exception("unit %s: %s failed to clean up", self.unit.index, stage.name)

    def drain(self) -> None:
        for inbox in self.queues:
            while True:
                try:
                    inbox.get_nowait()
                except queue.Empty:
                    break

    def retire(self) -> None:
        """Lets the threads finish what they are doing and stop; nothing of theirs is kept."""
        self.retired = True
        self.drain()
        for inbox in self.queues:
            try:
                inbox.put_nowait(Shutdown(generation=-1))
            except queue.Full:
                logger.warning("unit %s: queue full while retiring", self.unit.index)

    def alive(self) -> bool:
        return not self.dead and all(t.is_alive() for t in self.threads)

    def stall(self) -> str:
        """What held up a drain, in words: the first stage that did not pass the session-end marker on (every
        stage after it waits for it), what it was doing and for how long, and how much waited in its queue."""
        for index, (stage, ack) in enumerate(zip(self.stages, self.acks)):
            if ack.is_set():
                continue
            if stage.name in self.dead or not self.threads[index].is_alive():
                return f"its {stage.name} thread died"
            working = self.working[index]
            if working is None:
                return f"{stage.name} did not reset (on_session_end failed)"
            kind, since = working
            queued = self.queues[index].qsize()
            return f"{stage.name} busy with one {kind} for {time.monotonic() - since:.1f} s, {queued} more queued"
        return "every stage drained late"


class PipelineUnit:
    """A complete VAD -> STT -> LM -> TTS pipeline serving one session at a time.

    The pool claims and releases units; a unit itself only knows how to start a
    session, pass messages in, send what comes out to the session's sink, and
    end a session cleanly (or be rebuilt when it cannot).
    """

    def __init__(
        self,
        index: int,
        build_stages: StageFactory,
        release_timeout_s: float = 5.0,
        queue_size: int = 1000,
    ) -> None:
        self.index = index
        self.context = SessionContext()
        self._build_stages = build_stages
        self._release_timeout_s = release_timeout_s
        self._queue_size = queue_size
        self._sink: Sink | None = None
        self._sink_lock = threading.Lock()
        self.state = UnitState.WARMING
        self.session_id: str | None = None
        self.since = time.time()
        self.sessions_served = 0
        self.rebuilds = 0
        self.last_rebuild: str | None = None
        self._wiring = _Wiring(self, build_stages(self.context), queue_size)

    # --- life cycle -------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        self._wiring.start()
        for ready in self._wiring.ready:
            ready.wait(timeout)
        if self._wiring.dead:
            raise RuntimeError(f"unit {self.index}: stages failed to set up: {self._wiring.dead}")

    def stop(self) -> None:
        self.context.cancel_everything()
        self._wiring.retire()
        for thread in self._wiring.threads:
            thread.join(timeout=5)

    def set_state(self, state: UnitState, session_id: str | None = None) -> None:
        self.state = state
        self.session_id = session_id
        self.since = time.time()

    # --- sessions ---------------------------------------------------------

    def begin(self, sink: Sink, session_id: str) -> int:
        """Starts a session (the pool has already marked this unit taken). Returns its generation."""
        with self._sink_lock:
            self.context.reset(self.context.generation + 1)
            self._sink = sink
        self.sessions_served += 1
        self.set_state(UnitState.BUSY, session_id)
        return self.context.generation

    def submit(self, msg: Downstream) -> None:
        """Hands a message from the session to the head stage; every stage passes on what it does not handle."""
        if not self.context.is_current(msg.generation):
            return
        self._wiring.queues[0].put(msg)

    def cancel(self, response_id: str, reason: str) -> None:
        self.context.cancel(response_id, reason)

    def emit(self, out: Outbound) -> None:
        """Called by stage threads. Output of an older generation never reaches a sink."""
        with self._sink_lock:
            if self._sink is None or not self.context.is_current(out.generation):
                return
            # Inside the lock: held output of a confirmed turn keeps its place in the stream.
            for ready in self.context.admit(out):
                if isinstance(ready, (AudioOut, TextDelta)) and ready.timeline is not None:
                    ready.timeline.mark("emitted")
                try:
                    self._sink(ready)
                except Exception:
                    logger.exception("unit %s: session sink failed", self.index)

    def stage_died(self, stage: str, message: str) -> None:
        """Called on a dying stage thread: the current session (if any) must end; ``healthy()`` is now False."""
        self.emit(UnitFailed(generation=self.context.generation, stage=stage, message=message))

    def end(self) -> bool:
        """Ends the session: drain, pass a session-end marker through every stage, wait for all.

        Blocks (run it off the event loop). Returns False when the unit did not
        drain in time and was rebuilt instead.
        """
        self.set_state(UnitState.DRAINING, self.session_id)
        with self._sink_lock:
            self._sink = None
            ended = self.context.generation
            self.context.generation = ended + 1  # everything of the old session is stale now
        self.context.cancel_everything()
        wiring = self._wiring
        wiring.drain()
        for ack in wiring.acks:
            ack.clear()
        wiring.queues[0].put(SessionEnd(generation=ended))
        deadline = time.monotonic() + self._release_timeout_s
        # A dead stage thread never acknowledges: do not wait for it.
        clean = wiring.alive() and all(ack.wait(max(0.0, deadline - time.monotonic())) for ack in wiring.acks)
        clean = clean and wiring.alive()
        if not clean:
            cause = f"did not drain in {self._release_timeout_s:.1f} s: {wiring.stall()}"
            logger.error("unit %s %s: quarantined and rebuilt", self.index, cause)
            self.set_state(UnitState.QUARANTINED)
            self.rebuild(cause)
        self.context.reset(self.context.generation + 1)
        return clean

    def rebuild(self, cause: str | None = None) -> None:
        """Replaces every stage thread; the old ones finish their current message and stop. ``cause`` says why
        (kept as ``last_rebuild``; without it, the stage threads that died, or a drain that took too long)."""
        old = self._wiring
        dead = old.dead or [stage.name for stage, thread in zip(old.stages, old.threads) if not thread.is_alive()]
        self.last_rebuild = cause or (
            f"stage thread died ({', '.join(dead)})" if dead else f"did not drain in {self._release_timeout_s:.1f} s"
        )
        old.retire()
        self._wiring = _Wiring(self, self._build_stages(self.context), self._queue_size)
        self.rebuilds += 1
        self.start(timeout=60)

    def stages(self) -> list[Stage]:
        return list(self._wiring.stages)

    def healthy(self) -> bool:
        return self._wiring.alive()

    def snapshot(self) -> UnitSnapshot:
        return {
            "index": self.index,
            "state": self.state.value,
            "session_id": self.session_id,
            "since": self.since,
            "sessions_served": self.sessions_served,
            "rebuilds": self.rebuilds,
            "last_rebuild": self.last_rebuild,
            "activity": ("answering" if self.context.assistant_speaking() else "listening")
            if self.state is UnitState.BUSY
            else "",
        }
