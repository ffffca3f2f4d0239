"""The translation WebSocket endpoint (``/v1/realtime/translations``): the socket in, the socket out.

The session is :class:`realtime.live.translation.TranslationSession`, opened by
:func:`realtime.live.translation.open_translation` with the same credentials, owner rule and pool as a voice
session (a client secret: one made for a translation); the handshake, the refusal and the send are the voice
endpoint's own (:class:`realtime.transports.websocket.SessionSocket`); this consumer only carries its frames.
"""

from __future__ import annotations

from realtime.live.translation import TranslationSession, open_translation
from realtime.live.transport import Refusal
from realtime.node import runtime
from realtime.transports.websocket import SessionSocket


class TranslationConsumer(SessionSocket):
    """One translation session per socket."""

    owner_rule = True  # opened through realtime.live.opening's credentials; owned as a voice session is

    session: TranslationSession | None = None

    def live(self) -> TranslationSession | None:
        return self.session

    async def connect(self) -> None:
        request = self.open_request(await self.accept_session())
        try:
            self.session = await open_translation(runtime.current(), self, request)
        except Refusal as refusal:
            await self.refuse(refusal)

    async def disconnect(self, code: int) -> None:
        if self.session is not None:
            await self.session.end(self.end_reason(code), code)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session is not None:
            await self.session.receive(text_data, len(text_data) if text_data is not None else len(bytes_data or b""))
