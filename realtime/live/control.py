"""Who ends or steers a live session from outside it: the server shutting down, an administrator, a revoked key
(``realtime.node.revocation`` sends that message), and call control (hang-up, accept, reject, refer), each
through the owner rule (``realtime.access.owner``), here or from another process through the session's mailbox."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from realtime.access.owner import Caller, Owner
from realtime.audit import records
from realtime.live.transport import ControlAnswer, Controlled, Transport
from realtime.models import EndReason
from realtime.node import cluster
from realtime.node.runtime import Runtime
from realtime.protocol.close_codes import CLOSE_GOING_AWAY, CLOSE_NORMAL, CLOSE_POLICY
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)

HANG_UP = "hangup"  # the control action that ends a call (DELETE /v1/realtime/calls/{call_id}, /hangup)


class SessionControl:
    """The outside's way into :class:`realtime.live.core.SessionCore`, which sets these attributes."""

    id: str
    ended: bool
    runtime: Runtime
    transport: Transport
    owner: Owner
    call_id: str | None

    if TYPE_CHECKING:
        # realtime.live.remote_supervision: a supervisor on another node
        async def supervised_from_afar(self, message: dict[str, Any]) -> None: ...

        async def frame_from_afar(self, message: dict[str, Any]) -> None: ...

        async def left_from_afar(self, message: dict[str, Any]) -> None: ...

        async def end(
            self, reason: str, close_code: int | None, error: EventError | None = None, close_reason: str = ""
        ) -> None: ...

        async def key_revoked(self, api_key_id: int | None) -> None: ...

    async def going_away(self) -> None:
        await self.end(
            EndReason.SERVER_CLOSED,
            CLOSE_GOING_AWAY,
            EventError("server_shutting_down", "The server is shutting down.", error_type="server_error"),
            "The server is shutting down",
        )

    async def end_revoked(self) -> None:
        logger.info("session %s: its API key was revoked", self.id)
        await self.end(
            EndReason.ADMIN_ENDED,
            CLOSE_POLICY,
            EventError("invalid_api_key", "The API key of this session was revoked or deleted."),
            "API key revoked",
        )

    async def end_by_admin(self) -> None:
        logger.info("session %s: ended by an administrator", self.id)
        await self.end(
            EndReason.ADMIN_ENDED,
            CLOSE_POLICY,
            EventError("session_ended_by_admin", "An administrator ended this session.", error_type="server_error"),
            "Session ended by an administrator",
        )

    async def hang_up(self) -> None:
        """The call was hung up (``DELETE /v1/realtime/calls/{call_id}``, on this process or another)."""
        await self.end(EndReason.CLIENT_CLOSED, None)
        await self.transport.close(CLOSE_NORMAL, "The call was hung up")

    def change_owner(self, owner: Owner) -> None:
        """A new owner (a SIP call's, once a key accepted it), kept in the session's record too."""
        self.owner = owner
        records.session_updated(self.runtime.writer, self.id, **owner.record_fields())

    async def control(self, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
        """A control request on this session's call, asked on this process or another (``call.control``), for a
        caller the owner rule permits: ``hangup`` for any call; ``accept``, ``reject`` or ``refer`` run by a
        transport that is :class:`Controlled` (a SIP call). To anyone else, and for any other action, the call
        does not exist."""
        if self.ended or not self.owner.may_control(caller, action):
            return ControlAnswer.not_found(self.call_id or self.id)
        if action == HANG_UP:
            await self.hang_up()
            return ControlAnswer(200)
        if not isinstance(self.transport, Controlled):
            return ControlAnswer.not_found(self.call_id or self.id)
        return await self.transport.control(action, body, caller)

    async def _control_by(self, message: dict[str, Any]) -> None:
        """``call.control`` from another process: :meth:`control`, its answer sent back where the request says."""
        action, body = message.get("action"), message.get("body")
        if not isinstance(action, str) or not isinstance(body, dict):
            answer = ControlAnswer(400, "invalid_request", "The control request names no action or has no body.")
        else:
            try:
                answer = await self.control(action, body, Caller.from_message(message.get("caller")))
            except Exception:  # the asker gets a 500, not a 404 after its wait
                logger.exception("session %s: the call control request %r failed", self.id, action)
                answer = ControlAnswer(500, "server_error", "The call control request failed on the server.")
        await cluster.answer_control(message, answer.as_message())

    # The session's mailbox (realtime.live.mailbox): message type -> what it does.
    MAILBOX: dict[str, Callable[[SessionControl, dict[str, Any]], Awaitable[None]]] = {
        cluster.END_SESSION: lambda core, message: core.end_by_admin(),
        cluster.KEY_REVOKED: lambda core, message: core.key_revoked(_key_id(message)),
        cluster.CALL_CONTROL: lambda core, message: core._control_by(message),
        cluster.SUPERVISE_JOIN: lambda core, message: core.supervised_from_afar(message),
        cluster.SUPERVISE_FRAME: lambda core, message: core.frame_from_afar(message),
        cluster.SUPERVISE_LEAVE: lambda core, message: core.left_from_afar(message),
    }


def _key_id(message: dict[str, Any]) -> int | None:
    """The API key a :data:`cluster.KEY_REVOKED` message names (None: it names none, so it is the session's)."""
    key = message.get("api_key_id")
    return key if isinstance(key, int) and not isinstance(key, bool) else None
