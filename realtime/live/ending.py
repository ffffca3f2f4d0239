"""How a live session ends, whatever its kind (a voice agent's :class:`realtime.live.core.SessionCore`, a
translation's :class:`realtime.live.translation.TranslationSession`): the part of their one ``end`` they share.

Say why (an ``error`` event), stop the session's tasks, give its unit back, record the end (even when the
release fails), close the transport when the server ends it, and leave the mailbox last, whatever failed before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from django.utils import timezone

from pipelines.pool import Lease
from realtime.live.mailbox import Mailbox
from realtime.live.transport import Transport
from realtime.node.runtime import Runtime
from realtime.protocol.events import error_event
from realtime.protocol.wire import EventError


class Ending(Protocol):
    """What a session that ends this way has."""

    id: str
    runtime: Runtime
    transport: Transport
    lease: Lease | None
    mailbox: Mailbox

    async def going_away(self) -> None: ...


async def wind_up(
    session: Ending,
    send: Callable[[dict[str, Any]], Awaitable[None]],
    reason: str,
    close_code: int | None,
    error: EventError | None,
    close_reason: str,
    tasks: Iterable[asyncio.Task[None] | None],
    counts: Callable[[], dict[str, Any]],
    then: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Ends ``session`` (whose ``ended`` its caller has just set): ``error`` sent through ``send``, ``tasks``
    cancelled (not the one running this), the unit released, the record's end written with ``counts()`` (and why
    the unit was rebuilt, where it could not drain), the transport closed when ``close_reason`` says why (empty:
    the client went, nothing to close), ``then``."""
    try:
        if error is not None:
            await send(error_event(error.code, error.message, error.param, None, error.error_type))
        current = asyncio.current_task()
        for task in list(tasks):
            if task is not None and task is not current:
                task.cancel()
        rebuilt = ""
        try:
            lease, pool = session.lease, session.runtime.pool
            if lease is not None and pool is not None and not await asyncio.wrap_future(pool.release(lease)):
                rebuilt = lease.unit.last_rebuild or "rebuilt"  # the unit did not drain: why, in words
        finally:
            session.runtime.session_ended(
                session,
                session.id,
                ended_at=timezone.now(),
                end_reason=reason,
                close_code=close_code,
                unit_rebuild=rebuilt[:200],
                **counts(),
            )
        if close_reason and close_code is not None:
            await session.transport.close(close_code, close_reason)
        if then is not None:
            await then()
    finally:
        await session.mailbox.close()
