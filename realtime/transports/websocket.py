"""The Realtime WebSocket endpoint: the socket in, the socket out.

The session itself (opening, settings, conversation, limits, responses, records, the
channel-layer mailbox) is :class:`realtime.live.core.SessionCore`, opened by
:func:`realtime.live.core.open_session`; this consumer is its WebSocket transport.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

from realtime.access import auth, owner
from realtime.live.core import SessionCore, open_session
from realtime.live.opening import OpenRequest
from realtime.live.remote_supervision import SupervisorRelay
from realtime.live.transport import ControlAnswer, Refusal, ServerEvent
from realtime.models import EndReason, TransportKind
from realtime.node import runtime
from realtime.protocol.close_codes import CLOSE_POLICY
from realtime.protocol.events import error_event, server_event
from realtime.protocol.session import render

logger = logging.getLogger(__name__)

# Close codes only a server sends (RFC 6455): the peer's end, not the client's. uvicorn closes live
# sockets with 1012 when it shuts down.
SERVER_CLOSE_CODES = {1012: EndReason.SERVER_CLOSED}
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
SUPERVISE = "supervise"  # ?call_id=ID&mode=supervise: a supervisor of any live session (realtime.live.supervision)


def live_session(session_or_call_id: str) -> SessionCore | None:
    """The live session a supervisor names, by its call's id or its own."""
    current = runtime.current()
    found = current.calls.get(session_or_call_id) or next(
        (live for live in current.sessions if isinstance(live, SessionCore) and live.id == session_or_call_id), None
    )
    return found if isinstance(found, SessionCore) else None


class SessionSocket(AsyncWebsocketConsumer):
    """What the WebSocket endpoints share (``/v1/realtime``, ``/v1/realtime/translations``): the handshake (only
    the ``realtime`` subprotocol echoed, never ``openai-insecure-api-key.KEY``), the request a session opens
    with, a refusal said and closed, events as JSON text, and the unit given back whatever ends the consumer."""

    # The socket needs no channel of its own: the session's mailbox (realtime.live.mailbox) is on the layer.
    channel_layer_alias = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gone = asyncio.Event()  # set when the client's close (or the connection's loss) arrives

    def live(self) -> Any:
        """The session this socket carries (None until it opened); it has ``ended`` and ``end``."""
        return None

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self._gone.set()
        await super().websocket_disconnect(message)

    async def close_unless_closed(self, code: int, reason: str, grace_s: float) -> None:
        """:class:`realtime.live.transport.ClosedByClient`: the client's close within ``grace_s``, or ours."""
        try:
            await asyncio.wait_for(self._gone.wait(), grace_s)
        except TimeoutError:
            await self.close(code=code, reason=reason)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Whatever ends this consumer, even an exception no handler caught, the unit goes back."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            session = self.live()
            if session is not None and not session.ended:
                logger.error("session %s ended without a disconnect; releasing its unit", session.id)
                await asyncio.shield(session.end(EndReason.ERROR, None))

    async def accept_session(self) -> dict[str, list[str]]:
        """Accepts the handshake; returns its query."""
        offered = self.scope.get("subprotocols") or []
        await self.accept(subprotocol="realtime" if "realtime" in offered else None)
        return parse_qs(self.scope.get("query_string", b"").decode())

    def open_request(self, query: dict[str, list[str]], **fields: Any) -> OpenRequest:
        client = self.scope.get("client") or ("", 0)
        return OpenRequest(
            transport=TransportKind.WEBSOCKET,
            scope=self.scope,
            model=query.get("model", [None])[0],
            client_addr=str(client[0] or ""),
            user_agent=self._header("user-agent"),
            **fields,
        )

    async def refuse(self, refusal: Refusal) -> None:
        await self.send_event(refusal.event())
        await self.close(code=refusal.close_code, reason=refusal.reason)

    @staticmethod
    def end_reason(code: int) -> str:
        """Why the session ends when the socket closed with ``code``: 1008 from the protocol itself dropped a
        client that does not read (send buffer full); a code only a server sends is the peer's end."""
        if code == CLOSE_POLICY:
            return EndReason.SERVER_CLOSED
        return SERVER_CLOSE_CODES.get(code, EndReason.CLIENT_CLOSED)

    async def send_event(self, event: ServerEvent) -> None:
        await self.send(text_data=json.dumps(event.to_wire()))

    # ``close(code, reason)`` is AsyncWebsocketConsumer's own.

    def _header(self, name: str) -> str:
        for key, value in self.scope.get("headers", []):
            if key.decode("latin1").lower() == name:
                return value.decode("latin1")
        return ""


class RealtimeConsumer(SessionSocket):
    """One Realtime session per socket, or a follower of a live call (``?call_id=``, through the owner rule)."""

    owner_rule = True  # every way in asks realtime.access.owner (tests/security/test_owner_routes.py)

    core: SessionCore | None = None
    following: SessionCore | None = None  # ``?call_id=``: the live call's session this socket steers
    supervising = False  # ``&mode=supervise``: as a supervisor (realtime.live.supervision)
    relay: SupervisorRelay | None = None  # supervising a session another node holds

    def live(self) -> SessionCore | None:
        return self.core

    async def connect(self) -> None:
        query = await self.accept_session()
        if query.get("call_id"):
            await self._follow(query["call_id"][0], query.get("mode", [""])[0])
            return
        offered = self.scope.get("subprotocols") or []
        request = self.open_request(
            query,
            # Browsers cannot send the header: the "openai-beta.realtime-v1" subprotocol says the same.
            beta=("realtime=v1" in self._header("openai-beta").replace(" ", "").lower() or BETA_SUBPROTOCOL in offered),
            transcription=query.get("intent", [""])[0] == "transcription",
        )
        try:
            self.core = await open_session(runtime.current(), self, request)
        except Refusal as refusal:
            await self.refuse(refusal)

    async def _follow(self, call_id: str, mode: str = "") -> None:
        """Attaches this socket to a live call (SIP or WebRTC) beside its own transport: the session's events
        without the audio, and client events into the same session. Ending the socket leaves the call alone.

        Allowed to whom the owner rule allows (:mod:`realtime.access.owner`); to anyone else the call does not
        exist (the same ``error`` and close as an unknown id). Identifying the caller spends no client secret.

        ``mode=supervise``: a supervisor (:mod:`realtime.live.supervision`) of any live session, found by its
        session's id or its call's, allowed by ``Owner.supervises`` (a staff user's cookie will do); it gets the
        audio of both sides too, and sends only ``supervisor.*`` events."""
        if mode not in ("", SUPERVISE):
            error = error_event("invalid_value", f"Invalid 'mode': '{mode[:50]}'. Supported: '{SUPERVISE}'.", "mode")
            await self.send_event(ServerEvent.of(error))
            await self.close(code=CLOSE_POLICY, reason="Invalid mode")
            return
        self.supervising = mode == SUPERVISE
        try:
            caller = await (owner.identify_supervisor if self.supervising else owner.identify_scope)(self.scope)
        except auth.AuthError as exc:
            await self.send_event(ServerEvent.of(error_event(exc.code, exc.message, error_type=exc.error_type)))
            await self.close(code=exc.close_code, reason=exc.reason)
            return
        core = live_session(call_id) if self.supervising else runtime.current().calls.get(call_id)
        if not isinstance(core, SessionCore) or core.ended or not self._may(core, caller):
            if self.supervising and await self._relay(call_id, caller):
                return
            answer = ControlAnswer.not_found(call_id)
            await self.send_event(ServerEvent.of(error_event(answer.code, answer.message, answer.param)))
            await self.close(code=CLOSE_POLICY, reason="No such call")
            return
        self.following = core
        await (core.supervise if self.supervising else core.follow)(self, caller)
        if not await owner.still_identified(self.scope, caller):  # revoked while it was joining its key's group
            core.unfollow(self)
            self.following = None
            await self.send_event(ServerEvent.of(error_event("invalid_api_key", "The API key was revoked.")))
            await self.close(code=CLOSE_POLICY, reason="API key revoked")
            return
        await self.send_event(ServerEvent.of(server_event("session.created", session=render.as_ga(core.session))))
        if self.supervising:
            await self.send_event(core.supervisor_state())

    async def _relay(self, session_or_call_id: str, caller: owner.Caller) -> bool:
        """A session another node holds, reached through the channel layer (one this node holds and the owner rule
        refuses is asked alike, so that a refusal takes as long as an unknown id)."""
        self.relay = await SupervisorRelay.join(session_or_call_id, caller, self)
        return self.relay is not None

    def _may(self, core: SessionCore, caller: owner.Caller) -> bool:
        return core.owner.supervises(caller) if self.supervising else core.owner.may_reach(caller)

    async def disconnect(self, code: int) -> None:
        if self.following is not None:
            self.following.unfollow(self)
        if self.relay is not None:
            await self.relay.leave()
        if self.core is not None:
            await self.core.end(self.end_reason(code), code)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = len(text_data) if text_data is not None else len(bytes_data or b"")
        if self.relay is not None:
            await self.relay.receive(text_data, size)
        core = self.core or self.following
        if core is not None:
            if self.supervising:
                await core.receive_supervisor(self, text_data, size)
            else:
                await core.receive(text_data, size)
