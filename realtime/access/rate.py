"""How often one client address or one API key may offer a WebRTC call, and how many it may hold.

A probe held a pool of 2 with two dead offers every 15 s from one client, and sent 80-117
offers a second (refused ones too: a 401 flood, a 429 flood). Offers are metered per client
address before anything else is done with them (no database, no parsing), and per key once
the credentials are known; live calls (answered, connected or not) are counted per address
and per key. Over a limit: HTTP 429 ``rate_limit_exceeded`` with ``Retry-After``.

Per process (each node of a cluster meters its own), in memory: each table keeps at most
``MAX_TRACKED`` buckets, and a bucket that has filled up again is as good as none and is dropped.
Behind a proxy every client has the proxy's address: raise the per-address limits or set them to
0 (none) and limit per client at the proxy.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.conf import settings

MAX_TRACKED = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateTable:
    """Token buckets by name (``rate`` a second, ``burst`` at once); ``rate`` 0 meters nothing."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, max(1, burst), clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, name: str) -> float:
        """Takes one token for ``name``: 0.0 if there was one, else the seconds until there will be."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        bucket = self._buckets.pop(name, None)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        wait = 0.0
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
        else:
            wait = (1.0 - bucket.tokens) / self.rate
        self._buckets[name] = bucket  # the most recent last
        self._forget(now)
        return wait

    def _forget(self, now: float) -> None:
        while len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        oldest = list(itertools.islice(self._buckets.items(), 8))  # full again: as good as forgotten
        for name, bucket in oldest:
            if bucket.tokens + (now - bucket.at) * self.rate >= self.burst:
                del self._buckets[name]

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass(frozen=True)
class Limited:
    """A refusal: what was over its limit, and when to try again."""

    message: str
    retry_after_s: int


class CallLimits:
    """The offer rates and live-call counts of one process (``S2S_CALL_*``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.by_address = RateTable(settings.S2S_CALL_OFFERS_PER_SECOND, settings.S2S_CALL_OFFERS_BURST, clock)
        self.by_key = RateTable(settings.S2S_CALL_OFFERS_PER_SECOND, settings.S2S_CALL_OFFERS_BURST, clock)

    def offer_from(self, address: str) -> Limited | None:
        """Meters one offer from ``address`` (before its credentials are looked at)."""
        wait = self.by_address.take(address)
        if wait:
            return Limited(
                f"Too many call offers from {address}: at most {settings.S2S_CALL_OFFERS_PER_SECOND:g} a second "
                f"(burst {settings.S2S_CALL_OFFERS_BURST}, S2S_CALL_OFFERS_PER_SECOND).",
                math.ceil(wait),
            )
        return None

    def offer_by(self, key: str) -> Limited | None:
        """Meters one offer made with the API key ``key`` (a key id; its client secrets count as the key)."""
        wait = self.by_key.take(key) if key else 0.0
        if wait:
            return Limited(
                f"Too many call offers with this API key: at most {settings.S2S_CALL_OFFERS_PER_SECOND:g} a second "
                f"(burst {settings.S2S_CALL_OFFERS_BURST}, S2S_CALL_OFFERS_PER_SECOND).",
                math.ceil(wait),
            )
        return None

    @staticmethod
    def live_calls(calls: Iterable[tuple[str, str]], address: str, key: str) -> Limited | None:
        """Refuses one more call when ``address`` or ``key`` holds its most already (``calls``: the live calls'
        (address, key))."""
        per_address, per_key = settings.S2S_MAX_CALLS_PER_ADDRESS, settings.S2S_MAX_CALLS_PER_KEY
        held = list(calls)
        if per_address and sum(1 for a, _ in held if a == address) >= per_address:
            return Limited(
                f"{address} already holds {per_address} calls on this server (S2S_MAX_CALLS_PER_ADDRESS): "
                "hang one up first.",
                1,
            )
        if per_key and key and sum(1 for _, k in held if k == key) >= per_key:
            return Limited(
                f"This API key already holds {per_key} calls on this server (S2S_MAX_CALLS_PER_KEY): "
                "hang one up first.",
                1,
            )
        return None
