"""A live session's mailbox on the channel layer: how an admin, a revoked key, a hang-up or a call's control
(accept, reject, refer) on any process reaches it.

The mailbox is a channel of the session's own (``layer.new_channel()``), joined to the
groups messages are sent to (the session's, its API key's, its call's). One task reads it
and hands each message to the handler its type names in a table the session core gives;
a type with no handler is logged and dropped. Whatever carries the session, this is the
same: a transport never sees the channel layer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

logger = logging.getLogger(__name__)

GROUP_TIMEOUT_S = 2.0
Handler = Callable[[dict[str, Any]], Awaitable[None]]

_without_layer_logged = False


class Mailbox:
    """The channel, its groups and the one task that reads it; :meth:`close` leaves every group."""

    def __init__(self, session_id: str, handlers: Mapping[str, Handler]) -> None:
        self.session_id = session_id
        self.handlers = handlers
        self.layer: BaseChannelLayer | None = None
        self.channel = ""
        self.groups: tuple[str, ...] = ()
        self.closed = False
        self._reader: asyncio.Task[None] | None = None

    async def open(self, groups: list[str]) -> None:
        """Joins ``groups`` and starts reading. Never raises: without a channel layer (or with one that fails)
        the session runs on, only what is sent from elsewhere cannot reach it."""
        global _without_layer_logged
        self.layer = get_channel_layer()
        if self.layer is None:
            if not _without_layer_logged:
                _without_layer_logged = True
                logger.warning("no channel layer is configured: admin actions and revocations cannot end sessions")
            return
        try:
            self.channel = await asyncio.wait_for(self.layer.new_channel(), GROUP_TIMEOUT_S)
        except Exception:
            logger.exception(
                "session %s: no channel on the channel layer; admin actions cannot reach it", self.session_id
            )
            return
        for group in groups:
            if self.closed:
                return
            try:
                await asyncio.wait_for(self.layer.group_add(group, self.channel), GROUP_TIMEOUT_S)
                self.groups += (group,)
                if self.closed:  # closed while joining: close() did not see this one
                    await self._leave()
            except Exception:
                logger.exception("session %s: could not join the channel-layer group %s", self.session_id, group)
        if not self.closed:
            self._reader = asyncio.create_task(self._read(), name=f"mailbox-{self.session_id}")

    async def join(self, group: str) -> None:
        """Joins one more group of an open mailbox (a SIP call's API key, known once the call is accepted)."""
        if self.layer is None or not self.channel or self.closed or group in self.groups:
            return
        try:
            await asyncio.wait_for(self.layer.group_add(group, self.channel), GROUP_TIMEOUT_S)
            self.groups += (group,)
        except Exception:
            logger.exception("session %s: could not join the channel-layer group %s", self.session_id, group)

    async def _read(self) -> None:
        assert self.layer is not None
        while not self.closed:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("session %s: the channel layer failed; admin actions cannot reach it", self.session_id)
                return
            handler = self.handlers.get(message.get("type", ""))
            if handler is None:
                logger.warning("session %s: no handler for a %r message", self.session_id, message.get("type"))
                continue
            try:
                await handler(message)
            except Exception:  # one message must not end the reading (nor the session)
                logger.exception("session %s: handling a %r message failed", self.session_id, message.get("type"))

    async def close(self) -> None:
        """Stops reading (unless this is the reader itself, which then returns) and leaves every group."""
        if self.closed:
            return
        self.closed = True
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        await self._leave()

    async def _leave(self) -> None:
        groups, self.groups = self.groups, ()
        for group in groups:
            try:
                assert self.layer is not None
                await asyncio.wait_for(asyncio.shield(self.layer.group_discard(group, self.channel)), GROUP_TIMEOUT_S)
            except Exception:
                logger.warning("session %s: could not leave the channel-layer group %s", self.session_id, group)
