"""What both call transports (WebRTC, SIP) share: a call's settings checked before anything is answered,
the control of a call reached wherever it is held, the hang-up, and refusals as the API's JSON errors.

A call is in ``Runtime.calls`` whichever transport carries it, so ``DELETE /v1/realtime/calls/{call_id}``
(or ``POST .../hangup``) is one view for both; the SIP operator's ``accept``, ``reject`` and ``refer``
(:mod:`realtime.transports.sip.views`) go through the same :func:`reach_call`. The WebRTC offer and its answer are
:mod:`realtime.transports.webrtc.views`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from pipelines.translation import target_languages
from realtime.access import auth, owner
from realtime.access.owner import Caller
from realtime.live.control import SessionControl
from realtime.live.opening import AUTH_STATUS
from realtime.live.transport import ControlAnswer
from realtime.models import Prompt
from realtime.node import runtime
from realtime.node.cluster import control_elsewhere
from realtime.protocol import translation
from realtime.protocol.events import error_event
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError

logger = logging.getLogger(__name__)


class BadOffer(Exception):
    """An offer, its form or a call's settings this server will not answer: a 400 with ``code`` and ``param``."""

    def __init__(self, message: str, param: str | None = "sdp", code: str = "invalid_offer") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def error_response(
    status: int, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error"
) -> JsonResponse:
    """The same error object as the WebSocket's ``error`` event, as the body of an HTTP error."""
    response = JsonResponse(error_event(code, message, param, None, error_type), status=status)
    if status in (429, 503):
        response["Retry-After"] = "1"
    return response


def check_session(session: dict[str, Any] | None) -> None:
    """Validates the call's settings as ``session.update`` would, before any unit is claimed (sync: it may read
    a stored prompt)."""
    if session:
        trial = SessionConfig("check", settings.S2S_DEFAULT_MODEL, settings.S2S_POOL.engines.all_voices)
        try:
            trial.update(session, beta=False, prompts=Prompt.objects.lookup)
        except EventError as exc:
            raise BadOffer(exc.message, exc.param, exc.code) from None
        except RecursionError:
            raise BadOffer("The 'session' field is nested too deep.", "session") from None


def check_translation(session: dict[str, Any] | None) -> None:
    """Validates a translation call's settings as its ``session.update`` would (the output language, the source
    transcript, noise reduction), before any unit is claimed."""
    if session:
        trial = translation.new_settings("check", None, target_languages(), settings.S2S_MAX_SESSION_SECONDS)
        try:
            trial.update({key: value for key, value in session.items() if key not in ("type", "model")})
        except EventError as exc:
            raise BadOffer(exc.message, exc.param, exc.code) from None


def auth_refused(exc: auth.AuthError) -> JsonResponse:
    """A request whose credentials are refused, as the API's JSON error (401, 403; 503 when unverifiable)."""
    return error_response(AUTH_STATUS.get(exc.code, 503), exc.code, exc.message, error_type=exc.error_type)


async def reach_call(call_id: str, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
    """``action`` (``hangup``, ``accept``, ``reject``, ``refer``) run where the call is held: on this process, or
    on the one of the cluster that holds it, through the channel layer. The holder asks the owner rule
    (:meth:`realtime.live.core.SessionCore.control`), so a call the caller may not reach and one that does not
    exist get the same 404 wherever they are asked, and in as long: with a cluster an unknown id is known only once
    no node answered within ``S2S_CALL_CONTROL_TIMEOUT_S``, so every 404 waits that long (a refusal, here or on
    another node, would otherwise come at once and tell a live call from a missing one)."""
    started = time.monotonic()
    answer = await _reach(call_id, action, body, caller)
    if answer.status == 404 and settings.REDIS_URL:
        await asyncio.sleep(max(0.0, started + settings.S2S_CALL_CONTROL_TIMEOUT_S - time.monotonic()))
    return answer


async def _reach(call_id: str, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
    core = runtime.current().calls.get(call_id)  # a live call's session, whichever transport carries it
    if isinstance(core, SessionControl):  # a voice agent's or a translation's
        return await core.control(action, body, caller)
    if not settings.REDIS_URL:  # the in-memory channel layer reaches this process only
        return ControlAnswer.not_found(call_id)
    try:
        answer = await control_elsewhere(
            call_id, action, body, caller.as_message(), settings.S2S_CALL_CONTROL_TIMEOUT_S
        )
    except Exception:
        logger.exception("call %s: the %s request could not be sent through the channel layer", call_id, action)
        return ControlAnswer(503, "server_error", "The servers holding calls cannot be reached now; try again.")
    if answer is None:
        return ControlAnswer.not_found(call_id)
    return ControlAnswer.from_message(answer)


def control_answered(answer: ControlAnswer, done: HttpResponse) -> HttpResponse:
    """``done`` for a 200, else the refusal as the API's JSON error."""
    if answer.status == 200:
        return done
    error_type = "server_error" if answer.status >= 500 else "invalid_request_error"
    return error_response(answer.status, answer.code, answer.message, answer.param, error_type)


@csrf_exempt
@require_http_methods(["DELETE", "POST"])
@owner.route(auth_refused)
async def hang_up(request: HttpRequest, call_id: str, caller: Caller) -> HttpResponse:
    """``DELETE /v1/realtime/calls/{call_id}`` (or ``POST .../hangup``): ends the call, wherever it is held.

    Allowed to whom the owner rule allows (:mod:`realtime.access.owner`); to anyone else the call does not
    exist (404, as for an unknown id).
    """
    answer = await reach_call(call_id, "hangup", {}, caller)
    return control_answered(answer, HttpResponse(status=200 if request.method == "POST" else 204))
