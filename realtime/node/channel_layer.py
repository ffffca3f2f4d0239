"""The Redis channel layer, made to survive Redis going away.

Channels' consumers wait on ``channel_layer.receive`` next to the socket; with
the stock layer a Redis outage raises there and kills every live session (and
the unit it holds would only be freed by the disconnect that never comes).
Here ``receive`` waits out the outage instead, and the layer says it is
degraded: sessions go on, only the cross-process features (admin actions from
another process, the cluster's groups) wait for Redis to come back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels_redis.core import RedisChannelLayer

logger = logging.getLogger(__name__)

OUTAGE_ERRORS = (OSError, ConnectionError, TimeoutError, asyncio.TimeoutError)
_state: dict[str, Any] = {"degraded_since": None, "error": None}


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis.exceptions

    return (*OUTAGE_ERRORS, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def status() -> dict[str, Any]:
    """``{"status": "ok"}`` or ``{"status": "degraded", "since": ..., "error": ...}`` (for the probes).

    While degraded, asking probes Redis (at most every 2 s): with no session
    waiting on the layer nothing else would notice that it came back.
    """
    if _state["degraded_since"] is not None and time.monotonic() - _state.get("probed", 0.0) >= 2.0:
        _state["probed"] = time.monotonic()
        _probe()
    if _state["degraded_since"] is None:
        return {"status": "ok"}
    return {"status": "degraded", "since": _state["degraded_since"], "error": _state["error"]}


def _probe() -> None:
    import redis
    from django.conf import settings

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5).ping()
    except Exception as exc:
        _degraded(exc)
        return
    _recovered()


def _degraded(exc: BaseException) -> None:
    if _state["degraded_since"] is None:
        logger.error(
            "the channel layer lost Redis (%s: %s): sessions go on, cross-process features wait",
            type(exc).__name__,
            exc,
        )
        _state["degraded_since"] = time.time()
    _state["error"] = f"{type(exc).__name__}: {exc}"[:300]


def _recovered() -> None:
    if _state["degraded_since"] is not None:
        logger.warning("the channel layer reaches Redis again")
        _state["degraded_since"], _state["error"] = None, None


class ResilientRedisChannelLayer(RedisChannelLayer):
    async def receive(self, channel: str) -> dict[str, Any]:
        delay = 0.5
        while True:
            try:
                message = await super().receive(channel)
            except _redis_errors() as exc:
                _degraded(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            _recovered()
            return message

    async def group_add(self, group: str, channel: str) -> None:
        await self._watched(super().group_add(group, channel))

    async def group_discard(self, group: str, channel: str) -> None:
        await self._watched(super().group_discard(group, channel))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await self._watched(super().group_send(group, message))

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await self._watched(super().send(channel, message))

    async def _watched(self, call: Any) -> Any:
        try:
            result = await call
        except _redis_errors() as exc:
            _degraded(exc)
            raise
        _recovered()
        return result
