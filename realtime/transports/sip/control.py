"""The operator's control of a SIP call (``accept``, ``reject``, ``refer``), decided in one place whichever process
the request reached: the view on the call's own process calls it directly, the view on another process sends the
request through the call's mailbox (``realtime.node.cluster.control_elsewhere``), and the answer is the same.

Who may: whom the owner rule permits (:mod:`realtime.access.owner`), checked by the session core before any
action runs; to anyone else the call does not exist (404), as for a hang-up. The API key that accepts a ringing
call becomes its owner, so only that key refers it (or hangs it up) later.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from asgiref.sync import sync_to_async

from realtime.access.owner import Caller
from realtime.live.core import SessionCore
from realtime.live.transport import ControlAnswer
from realtime.transports.calls import BadOffer, check_session
from realtime.transports.sip.config import SipConfig

logger = logging.getLogger(__name__)

TARGET_URI = re.compile(r"^(sips?:[^\s<>]+|tel:\+?[0-9*#().\-]+(;[^\s<>]*)?)$")


class OperatedCall(Protocol):
    """What the operator's actions need of a call (:class:`realtime.transports.sip.call.SipCall`, which calls
    :func:`run`: this module never imports it)."""

    id: str
    state: str
    config: SipConfig
    core: SessionCore | None

    async def accept(self, session: dict[str, Any] | None, by: Caller | None = None) -> None: ...

    async def reject(self, status: int) -> None: ...

    def refer(self, target_uri: str) -> None: ...


class CallStateError(Exception):
    """An operation the call's state does not allow (409)."""


class BadRequest(Exception):
    """A control request the API refuses as it is (400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


async def accept(call: OperatedCall, body: dict[str, Any], caller: Caller) -> None:
    """Answers a ringing call with a session configuration (``type: "realtime"``, as the API takes it), checked
    as ``session.update`` would before anything is answered."""
    if body.get("type", "realtime") != "realtime":
        raise BadRequest("A call is accepted with a realtime session ('type': 'realtime').", "type")
    if call.state != "ringing":  # before the settings are read: a stored prompt costs a database query
        raise CallStateError(f"The call is {call.state}: only a ringing call can be accepted.")
    session = {**call.config.session, **body}
    await sync_to_async(check_session)(session)
    await call.accept(session, caller)


async def reject(call: OperatedCall, body: dict[str, Any], caller: Caller) -> None:
    """Declines a ringing call with a SIP status (603 Decline unless ``status_code`` says otherwise)."""
    status = body.get("status_code", 603)
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 699:
        raise BadRequest("status_code must be a SIP final status from 400 to 699.", "status_code")
    await call.reject(status)


async def refer(call: OperatedCall, body: dict[str, Any], caller: Caller) -> None:
    """Transfers an answered call: a REFER to the caller's side with ``Refer-To: target_uri``."""
    target = body.get("target_uri")
    if not isinstance(target, str) or not TARGET_URI.match(target):
        raise BadRequest("target_uri must be a sip:, sips: or tel: URI.", "target_uri")
    call.refer(target)
    logger.info("SIP call %s: transferred to %s", call.id, target)


ACTIONS: dict[str, Callable[[OperatedCall, dict[str, Any], Caller], Awaitable[None]]] = {
    "accept": accept,
    "reject": reject,
    "refer": refer,
}


async def run(call: OperatedCall, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
    """``action`` on ``call`` for ``caller`` (whom the session core let through): 200, or the refusal as the
    API's error (400 for a bad request or session, 409 for the call's state)."""
    if call.core is None or not call.core.owner.may_control(caller, action):  # the core asked already; never skipped
        return ControlAnswer.not_found(call.id)
    act = ACTIONS.get(action)
    if act is None:
        return ControlAnswer(400, "invalid_request", f"No call action {action!r}.")
    try:
        await act(call, body, caller)
    except BadRequest as exc:
        return ControlAnswer(400, "invalid_request", exc.message, exc.param)
    except BadOffer as exc:
        return ControlAnswer(400, exc.code, exc.message, exc.param)
    except CallStateError as exc:
        return ControlAnswer(409, "invalid_call_state", str(exc), "call_id")
    return ControlAnswer(200)
