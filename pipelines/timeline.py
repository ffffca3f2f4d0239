"""Where one turn's time goes: the moments from the end of the user's speech to the first reply audio.

A :class:`Timeline` travels with the messages of one user turn (``Message.timeline``): the VAD
starts it, each stage and the unit's queues mark what happened to the turn, and the TTS stage hands
its breakdown to the session with ``ResponseFinished``. Marks are ``time.monotonic()`` (one clock for
every process of the machine, so a benchmark's client can put its own moments beside them); each is
kept once, the first time it happens. The breakdown's spans run from one mark to the next in
``ORDER``, so they add up to the end of speech to the first audio sent.

Beside the marks, what the work waited for: a thread (a message waiting in a stage's queue is in the
spans as ``queued_*`` to ``*_start``), a lock (the TTS order across units, ``tts_order_wait_s``), and
a core: the run-queue delay of this process's threads while the turn was on its way
(``core_wait_s``, thread-seconds from Linux's schedstat; 0 where the kernel does not say).
"""

from __future__ import annotations

import os
import threading
import time

# The marks, in the order a turn passes them; a breakdown's span is named after the mark that ends it.
ORDER = (  # the VAD's last speech frame
    "speculation",  # the turn sent ahead to STT while the silence window is still open (none: skipped)
    "stt_start",  # the STT thread took it
    "stt_end",
    "lm_start",  # the LM thread took the transcript
    "lm_first_token",
    "lm_first_piece",  # the first words sent to TTS
    "tts_start",  # the TTS thread took them
    "tts_first_audio",
    "decision",  # the VAD decided that the turn is over (speech_stopped)
    "emitted",  # the first audio left the unit for the session (held until the decision when speculative)
)
TASKS = "/proc/self/task"
SPEECH_END = "speech_end"  # the VAD's last speech frame: where every turn's time starts
SENT = "sent"  # the first audio handed to the transport (added by the session's recorder)


def run_queue_s() -> float:
    """Seconds this process's threads have spent waiting for a core, summed (0.0 where unknown).

    One small read per thread (about a millisecond for 60 threads; more on a busy machine), taken twice per turn.
    """
    total = 0
    try:
        tasks = os.listdir(TASKS)
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"{TASKS}/{task}/schedstat", "rb") as stat:
                total += int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


class Timeline:
    """The marks of one turn; any stage thread may mark it (each mark is set once, under a lock)."""

    def __init__(self, speech_end_at: float | None = None) -> None:
        self._lock = threading.Lock()
        self.marks: dict[str, float] = {}
        self.added: dict[str, float] = {}
        self._run_queue_at_start = run_queue_s()
        self._core_wait: float | None = None
        self.mark(SPEECH_END, speech_end_at)

    def mark(self, name: str, at: float | None = None) -> None:
        with self._lock:
            self.marks.setdefault(name, time.monotonic() if at is None else at)
            if name == "emitted" and self._core_wait is None:
                self._core_wait = max(0.0, run_queue_s() - self._run_queue_at_start)

    @property
    def speech_end_at(self) -> float:
        """When the user's speech ended (``time.monotonic()``): where the turn's time starts."""
        return self.marks[SPEECH_END]

    def reached(self, name: str) -> bool:
        with self._lock:
            return name in self.marks

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.added[name] = self.added.get(name, 0.0) + seconds

    def breakdown(self) -> dict[str, float]:
        """Each mark reached, in seconds after the end of speech; the lock waits; the core wait; and the start.

        ``speech_end_at`` is the absolute start (``time.monotonic()``). A mark the turn never reached (no
        speculation, a text-only response) is absent. :func:`spans` turns this into the spans that add up.
        """
        with self._lock:
            marks, added, core = dict(self.marks), dict(self.added), self._core_wait
        start = marks[SPEECH_END]
        result: dict[str, float] = {"speech_end_at": start}
        result.update({name: at - start for name, at in marks.items() if name in ORDER})
        result.update(added)
        if core is not None:
            result["core_wait_s"] = core
        return result


def spans(breakdown: dict[str, float]) -> list[tuple[str, float, float]]:
    """(mark, seconds since the mark before it, seconds since the end of speech), in the order they happened.

    The spans add up to the last mark's time. Marks are ``ORDER``'s and ``SENT``, which the session's
    recorder adds (the first audio sent to the client).
    """
    marks = sorted(
        (at, ORDER.index(name) if name in ORDER else len(ORDER), name)
        for name, at in breakdown.items()
        if name in ORDER or name == SENT
    )
    result, previous = [], 0.0
    for at, _, name in marks:
        result.append((name, at - previous, at))
        previous = at
    return result
