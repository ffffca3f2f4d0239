"""The fixed pool of pipeline units held by one server process."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.translation import Translations
from pipelines.unit import PipelineUnit, Sink, UnitSnapshot, UnitState

logger = logging.getLogger(__name__)


@dataclass
class Lease:
    """A claimed unit, for one session."""

    unit: PipelineUnit
    generation: int
    session_id: str


def _settle(future: concurrent.futures.Future[Any], outcome: object) -> None:
    """Resolves a release's future, unless its waiter gave up on it (a cancelled task cancels the future it
    awaited): the unit is free all the same, and nobody is left to tell."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        logger.debug("a release finished after its waiter was cancelled")


class PipelinePool:
    """N units, claimed atomically and released only once every stage has let go.

    ``claim`` never blocks and never awaits: it is called from the event loop and
    finding a free unit and marking it taken happen under one lock. ``release``
    runs the unit's drain on a thread of its own and returns a future.
    """

    def __init__(self, units: Sequence[PipelineUnit]) -> None:
        self.units = list(units)
        self._lock = threading.Lock()
        self._warm = threading.Event()
        self._closing = False
        self._freeing: list[concurrent.futures.Future[None]] = []  # waiters for a draining unit (see freeing())
        self.rejections = 0
        self.started_at = time.time()
        # The translation sessions' engines (pipelines.translation), loaded when the first one asks; a
        # translation session claims a unit as any session does, and runs on the unit's models.
        self.translations: Translations | None = None

    # --- start and stop ---------------------------------------------------

    def start(
        self,
        warm_turn: Callable[[PipelineUnit], dict[str, float]] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict[int, dict[str, float]]:
        """Starts every unit's threads, runs ``warm_turn`` on each, then admits sessions."""
        timings: dict[int, dict[str, float]] = {}
        for unit in self.units:
            if progress:
                progress(f"starting unit {unit.index}")
            unit.start(timeout=300)
            if warm_turn is not None:
                if progress:
                    progress(f"warming unit {unit.index}")
                timings[unit.index] = warm_turn(unit)
            with self._lock:
                unit.set_state(UnitState.IDLE)
        self._warm.set()
        return timings

    @property
    def warm(self) -> bool:
        return self._warm.is_set()

    def stop_admitting(self) -> None:
        self._closing = True

    @property
    def admitting(self) -> bool:
        return self.warm and not self._closing

    def shutdown(self) -> None:
        self._closing = True
        for unit in self.units:
            unit.stop()

    # --- sessions ---------------------------------------------------------

    def claim(self, sink: Sink, session_id: str, count_refusal: bool = True) -> Lease | None:
        """Takes a free unit for a session, or returns None when all are in use (counted in ``rejections``
        unless ``count_refusal`` is false: a claim that will be tried again, :meth:`refused` counts its end)."""
        with self._lock:
            if not self.admitting:
                return None
            for unit in self.units:
                if unit.state is UnitState.IDLE and not unit.healthy():
                    self._rebuild_later(unit)  # a stage thread died while the unit was idle
                elif unit.state is UnitState.IDLE:
                    generation = unit.begin(sink, session_id)
                    return Lease(unit, generation, session_id)
            if count_refusal:
                self.rejections += 1
            return None

    def refused(self) -> None:
        """Counts a claim that gave up (one tried with ``count_refusal=False``, then waited in vain)."""
        with self._lock:
            self.rejections += 1

    def freeing(self) -> concurrent.futures.Future[None] | None:
        """A future resolved once a unit is free: at once if one is, else when a unit that is draining now (its
        session just ended) is given back. None when no unit is free or draining: a pool that is really full
        stays full, and its refusal should not wait."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            if any(unit.state is UnitState.IDLE for unit in self.units):
                future.set_result(None)
                return future
            if not any(unit.state is UnitState.DRAINING for unit in self.units):
                return None
            future.set_running_or_notify_cancel()
            self._freeing.append(future)
        return future

    def full(self) -> bool:
        """No unit free, and none about to be (draining): what a claim now would meet, waiting or not."""
        with self._lock:
            return not any(unit.state in (UnitState.IDLE, UnitState.DRAINING) for unit in self.units)

    def _set_idle(self, unit: PipelineUnit) -> None:
        """Marks ``unit`` free and tells whoever waits for one (:meth:`freeing`)."""
        with self._lock:
            unit.set_state(UnitState.IDLE)
            waiting, self._freeing = self._freeing, []
        for future in waiting:
            _settle(future, None)

    def release(self, lease: Lease) -> concurrent.futures.Future[bool]:
        """Ends the lease's session on a thread; the future resolves once the unit is free again.

        The future is running from the start, so it cannot be cancelled: a waiter that is itself cancelled
        (``asyncio.wrap_future`` passes the cancellation on) leaves the release to finish, and the thread
        never meets a cancelled future when it sets the result.
        """
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        with self._lock:  # draining from now, not from when the thread starts: a claim now waits for it (freeing)
            lease.unit.set_state(UnitState.DRAINING, lease.session_id)

        def run() -> None:
            try:
                clean = lease.unit.end()
            except Exception as exc:
                logger.exception("unit %s: release failed", lease.unit.index)
                lease.unit.set_state(UnitState.QUARANTINED)
                try:
                    lease.unit.rebuild()
                    clean = False
                except Exception:
                    logger.exception("unit %s: rebuild failed; it stays quarantined", lease.unit.index)
                    _settle(future, exc)
                    return
            self._set_idle(lease.unit)
            _settle(future, clean)

        threading.Thread(target=run, name=f"release-unit{lease.unit.index}", daemon=True).start()
        return future

    def _rebuild_later(self, unit: PipelineUnit) -> None:
        """Quarantines an unhealthy idle unit (under the lock) and rebuilds it on a thread of its own."""
        unit.set_state(UnitState.QUARANTINED)

        def run() -> None:
            try:
                unit.rebuild()
            except Exception:
                logger.exception("unit %s: rebuild failed; it stays quarantined", unit.index)
                return
            self._set_idle(unit)

        threading.Thread(target=run, name=f"rebuild-unit{unit.index}", daemon=True).start()

    # --- what the admin and the probes see --------------------------------

    def free_units(self) -> int:
        with self._lock:
            return sum(1 for unit in self.units if unit.state is UnitState.IDLE)

    def snapshot(self) -> list[UnitSnapshot]:
        with self._lock:
            return [unit.snapshot() for unit in self.units]
