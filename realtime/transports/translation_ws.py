"""The translation WebSocket endpoint (``/v1/realtime/translations``): the socket in, the socket out.

The session is :class:`realtime.live.translation.TranslationSession`, opened by
:func:`realtime.live.translation.open_translation` with the same credentials, owner rule and pool as a voice
session; this consumer only carries its frames.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

from realtime.live.opening import OpenRequest
from realtime.live.translation import TranslationSession, open_translation
from realtime.live.transport import Refusal, ServerEvent
from realtime.models import EndReason, TransportKind
from realtime.node import runtime
from realtime.protocol.close_codes import CLOSE_POLICY

logger = logging.getLogger(__name__)


class TranslationConsumer(AsyncWebsocketConsumer):
    """One translation session per socket."""

    owner_rule = True  # opened through realtime.live.opening's credentials; owned as a voice session is

    channel_layer_alias = None  # the session's mailbox is on the layer, not the socket
    session: TranslationSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Whatever ends this consumer, the unit goes back."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.session is not None and not self.session.ended:
                await asyncio.shield(self.session.end(EndReason.ERROR, None))

    async def connect(self) -> None:
        offered = self.scope.get("subprotocols") or []
        query = parse_qs(self.scope.get("query_string", b"").decode())
        await self.accept(subprotocol="realtime" if "realtime" in offered else None)
        client = self.scope.get("client") or ("", 0)
        request = OpenRequest(
            transport=TransportKind.WEBSOCKET,
            scope=self.scope,
            model=query.get("model", [None])[0],
            client_addr=str(client[0] or ""),
            user_agent=self._header("user-agent"),
        )
        try:
            self.session = await open_translation(runtime.current(), self, request)
        except Refusal as refusal:
            await self.send_event(refusal.event())
            await self.close(code=refusal.close_code, reason=refusal.reason)

    async def disconnect(self, code: int) -> None:
        if self.session is not None:
            reason = EndReason.SERVER_CLOSED if code == CLOSE_POLICY else EndReason.CLIENT_CLOSED
            await self.session.end(reason, code)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session is not None:
            await self.session.receive(text_data, len(text_data) if text_data is not None else len(bytes_data or b""))

    async def send_event(self, event: ServerEvent) -> None:
        await self.send(text_data=json.dumps(event.to_wire()))

    def _header(self, name: str) -> str:
        for key, value in self.scope.get("headers", []):
            if key.decode("latin1").lower() == name:
                return value.decode("latin1")
        return ""
