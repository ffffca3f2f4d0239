"""Per-session limits: what a client may send, how fast, for how long.

Each limit has its own error code and says whether the session goes on:

==========================  ================================  =====================================
limit                       error code                        then
==========================  ================================  =====================================
event size                  ``event_too_large``               the event is dropped; session goes on
events per second           ``rate_limit_exceeded``           the event is dropped; session goes on
input audio buffer length   ``input_audio_buffer_full``       the chunk is dropped; session goes on
session length              ``session_expired``               the session closes (1008)
idle time                   ``session_idle_timeout``          the session closes (1008)
conversation items / text   ``conversation_too_large``        the item is refused; session goes on
text of one item            ``string_above_max_length``       the item is refused; session goes on
instructions                ``string_above_max_length``       the update is refused; session goes on
==========================  ================================  =====================================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from realtime.protocol.items import Caps
from realtime.protocol.wire import EventError

Clock = Callable[[], float]


def max_frame_bytes(max_audio_bytes: int) -> int:
    """The largest client frame: the base64 of the largest audio append, plus room for its JSON."""
    return max_audio_bytes * 4 // 3 + 64 * 1024


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int
    events_per_second: float
    burst: int
    max_input_buffer_ms: int
    max_session_s: float
    idle_timeout_s: float  # 0: none
    conversation: Caps
    max_instructions_bytes: int


class TokenBucket:
    """``rate`` events per second on average, up to ``burst`` at once."""

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.at = clock()
        self.dropped = 0

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False


def rate_limits(bucket: TokenBucket, token_cap: int, reserved: int, now: float | None = None) -> list[dict]:
    """The limits ``rate_limits.updated`` reports at a response's start (the API's two names).

    ``requests``: the session's client-event bucket. ``tokens``: the output tokens the server lets
    one response produce (``token_cap``), less the ``reserved`` share the starting response may use;
    they come back when it is done.
    """
    now = time.monotonic() if now is None else now
    events = min(float(bucket.burst), bucket.tokens + (now - bucket.at) * bucket.rate)
    return [
        {
            "name": "requests",
            "limit": bucket.burst,
            "remaining": int(events),
            "reset_seconds": round((bucket.burst - events) / bucket.rate, 3),
        },
        {"name": "tokens", "limit": token_cap, "remaining": max(0, token_cap - reserved), "reset_seconds": 0.0},
    ]


class InputBuffer:
    """How much appended audio the pipeline holds uncommitted, as far as the session can tell.

    With manual turns everything appended since the last commit or clear is
    held. With server VAD only a turn being spoken is held (silence is not
    kept), so counting starts at ``speech_started`` and stops at the commit.
    """

    def __init__(self, max_ms: int) -> None:
        self.max_ms = max_ms
        self.held_ms = 0
        self.speaking = False

    def check(self, ms: int, server_vad: bool) -> None:
        """Raises ``input_audio_buffer_full`` when a chunk of ``ms`` would pass the limit (it must be dropped)."""
        if server_vad and not self.speaking:
            return
        if self.held_ms + ms > self.max_ms:
            raise EventError(
                "input_audio_buffer_full",
                f"The input audio buffer holds {self.held_ms} ms, the limit is {self.max_ms} ms: "
                "the chunk was dropped. Commit or clear the buffer.",
                "audio",
            )

    def add(self, ms: int, server_vad: bool) -> None:
        """Counts a chunk the pipeline accepted."""
        if server_vad and not self.speaking:
            return
        self.held_ms += ms

    def speech_started(self) -> None:
        self.speaking, self.held_ms = True, 0

    def emptied(self) -> None:
        """Committed or cleared (by the client or by the server's turn detection)."""
        self.speaking, self.held_ms = False, 0


def check_frame(size: int, limits: Limits) -> None:
    if size > limits.max_frame_bytes:
        raise EventError(
            "event_too_large",
            f"The event is {size} bytes; the limit is {limits.max_frame_bytes} bytes per event. It was dropped.",
        )


def rate_limited(bucket: TokenBucket) -> EventError:
    return EventError(
        "rate_limit_exceeded",
        f"More than {bucket.rate:g} events per second (burst {bucket.burst}): the event was dropped "
        f"({bucket.dropped} so far in this session).",
        error_type="rate_limit_error",
    )


def expired(limits: Limits) -> EventError:
    return EventError(
        "session_expired",
        f"Your session hit the maximum duration of {limits.max_session_s:g} seconds.",
        error_type="invalid_request_error",
    )


def idle(limits: Limits) -> EventError:
    return EventError(
        "session_idle_timeout", f"No events for {limits.idle_timeout_s:g} seconds: the session was closed."
    )
