"""The Realtime WebSocket endpoint: the socket, its credentials, and one way to end.

The session itself (settings, conversation, limits, responses, records) is
:class:`realtime.protocol.core.SessionCore`; this consumer is its WebSocket transport.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from pipelines.ids import new_id
from realtime.access import auth
from realtime.node import cluster
from realtime.node import runtime
from realtime.protocol.core import CLOSE_POLICY, Opening, Refusal, SessionCore, refuse
from realtime.protocol.events import error_event, server_event
from realtime.models import EndReason
from realtime.audit.records import principal_of

logger = logging.getLogger(__name__)

GROUP_TIMEOUT_S = 2.0
# Close codes only a server sends (RFC 6455): the peer's end, not the client's. uvicorn closes live
# sockets with 1012 when it shuts down.
SERVER_CLOSE_CODES = {1012: EndReason.SERVER_CLOSED}
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"


class RealtimeConsumer(AsyncWebsocketConsumer):
    """One Realtime session per socket."""

    core: SessionCore | None = None
    following: SessionCore | None = None  # ``?call_id=``: the live call's session this socket steers
    _groups: tuple[str, ...] = ()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Whatever ends this consumer, even an exception no handler caught, the unit goes back."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.core is not None and not self.core.ended:
                logger.error("session %s ended without a disconnect; releasing its unit", self.core.id)
                await asyncio.shield(self.core.end(EndReason.ERROR, None))

    async def connect(self) -> None:
        offered = self.scope.get("subprotocols") or []
        query = parse_qs(self.scope.get("query_string", b"").decode())
        # Only "realtime" is ever echoed: never the "openai-insecure-api-key.KEY" subprotocol.
        await self.accept(subprotocol="realtime" if "realtime" in offered else None)
        if query.get("call_id"):
            await self._follow(query["call_id"][0])
            return
        session_id = new_id("sess")
        client = self.scope.get("client") or ("", 0)
        opening = Opening(
            session_id=session_id,
            model=query.get("model", [settings.S2S_DEFAULT_MODEL])[0],
            # Browsers cannot send the header: the "openai-beta.realtime-v1" subprotocol says the same.
            beta=("realtime=v1" in self._header("openai-beta").replace(" ", "").lower() or BETA_SUBPROTOCOL in offered),
            transcription=query.get("intent", [""])[0] == "transcription",
            client_addr=str(client[0] or ""),
            user_agent=self._header("user-agent")[:500],
        )
        rt = runtime.current()
        try:  # before any claim: a connection without valid credentials never holds a unit
            principal = await auth.authenticate(self.scope, session_id)
        except auth.AuthError as exc:
            await self._refuse(rt, opening, Refusal(exc.code, exc.message, exc.close_code, exc.reason), exc.error_type)
            return
        if principal.name:
            self.scope["s2s_principal"] = f"{principal.kind}:{principal.name}"
        used_at = timezone.now()
        rt.writer.submit(lambda: auth.mark_used(principal, used_at))
        opening = replace(opening, principal=principal_of(self.scope), session_config=principal.session_config or None)
        try:
            self.core = SessionCore.claim(rt, self, opening)
        except Refusal as refusal:
            rt.writer.submit(lambda: auth.give_back_secret(principal))  # its session never started
            await self._refuse(rt, opening, refusal)
            return
        groups = [cluster.session_group(session_id)]
        if principal.api_key_id is not None:
            groups.append(cluster.key_group(principal.api_key_id))
        try:
            await self._join_groups(session_id, groups)
            await self.core.start()
        except Exception:
            logger.exception("session %s failed to start", session_id)
            await self.core.end(EndReason.ERROR, None)
            raise

    async def _follow(self, call_id: str) -> None:
        """Attaches this socket to a live call (SIP or WebRTC) beside its own transport: the session's events
        without the audio, and client events into the same session. Ending the socket leaves the call alone."""
        try:
            principal = await auth.authenticate(self.scope, call_id)
            if settings.S2S_AUTH_REQUIRED and principal.kind != "api_key":
                raise auth.AuthError("invalid_api_key", "Following a call takes an API key.")
        except auth.AuthError as exc:
            await self.send_event(error_event(exc.code, exc.message, error_type=exc.error_type))
            await self.close(code=exc.close_code, reason=exc.reason)
            return
        core = getattr(runtime.current().calls.get(call_id), "core", None)
        if core is None or core.ended:
            await self.send_event(error_event("call_not_found", f"No live call with id '{call_id}'.", "call_id"))
            await self.close(code=CLOSE_POLICY, reason="No such call")
            return
        self.following = core
        core.follow(self)
        await self.send_event(server_event("session.created", session=core.session.as_ga()))

    async def _refuse(
        self, rt: runtime.Runtime, opening: Opening, refusal: Refusal, error_type: str = "invalid_request_error"
    ) -> None:
        refuse(rt, opening, refusal)
        await self.send_event(error_event(refusal.code, refusal.message, error_type=error_type))
        await self.close(code=refusal.close_code, reason=refusal.reason)

    async def disconnect(self, code: int) -> None:
        if self.following is not None:
            self.following.unfollow(self)
        if self.core is not None:
            # 1008 from the protocol itself: it dropped a client that does not read (send buffer full).
            reason = (
                EndReason.SERVER_CLOSED
                if code == CLOSE_POLICY
                else SERVER_CLOSE_CODES.get(code, EndReason.CLIENT_CLOSED)
            )
            await self.core.end(reason, code)
        await self._leave_groups()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        core = self.core or self.following
        if core is not None:
            size = len(text_data) if text_data is not None else len(bytes_data or b"")
            await core.receive(text_data, size)

    # --- the transport the session core speaks through ---------------------------------

    async def send_event(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(event))

    # ``close(code, reason)`` is AsyncWebsocketConsumer's own.

    # --- the session's channel-layer group (admin actions from any process) --------------

    async def _join_groups(self, session_id: str, groups: list[str]) -> None:
        """Joins the groups an admin's "end session" and a key's revocation are sent to; without a channel layer
        the session still runs."""
        for group in groups:
            try:
                await asyncio.wait_for(self.channel_layer.group_add(group, self.channel_name), GROUP_TIMEOUT_S)
                self._groups += (group,)
            except Exception:
                logger.exception(
                    "session %s: could not join the channel-layer group %s; admin actions cannot reach it",
                    session_id,
                    group,
                )

    async def _leave_groups(self) -> None:
        groups, self._groups = self._groups, ()
        for group in groups:
            try:
                await asyncio.wait_for(self.channel_layer.group_discard(group, self.channel_name), GROUP_TIMEOUT_S)
            except Exception:
                logger.exception("could not leave the channel-layer group %s", group)

    async def session_end(self, message: dict[str, Any]) -> None:
        """``session.end`` from the admin: tell the client, free the unit, close with 1008."""
        if self.core is not None:
            await self.core.end_by_admin()

    async def key_revoked(self, message: dict[str, Any]) -> None:
        """``key.revoked``: the session's API key was revoked or deleted: error, free the unit, close with 1008."""
        if self.core is not None:
            await self.core.end_revoked()

    def _header(self, name: str) -> str:
        for key, value in self.scope.get("headers", []):
            if key.decode("latin1").lower() == name:
                return value.decode("latin1")
        return ""
