"""The operator's control of a SIP call, as OpenAI's GA API has it: ``POST /v1/realtime/calls/{call_id}/accept``,
``/reject`` and ``/refer`` (``/hangup`` and ``DELETE`` are the WebRTC views': they find SIP calls in the same
registry, ``Runtime.calls``). Allowed to an API key (anyone with authentication off)."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from realtime.access import auth
from realtime.node import runtime
from realtime.protocol.core import AUTH_STATUS
from realtime.transports.calls import BadOffer, check_session, error_response
from realtime.transports.sip.call import CallStateError, SipCall

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024
TARGET_URI = re.compile(r"^(sips?:[^\s<>]+|tel:\+?[0-9*#().\-]+(;[^\s<>]*)?)$")


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


async def _control(request: HttpRequest, call_id: str) -> tuple[SipCall, auth.Principal] | JsonResponse:
    """(the call, who asks), or the error response, for a control request: credentials first, then the call."""
    try:
        principal = await auth.authenticate_request(request.scope, request.headers.get("Authorization", ""), "")
    except auth.AuthError as exc:
        status = AUTH_STATUS.get(exc.code, 503)
        return error_response(status, exc.code, exc.message, error_type=exc.error_type)
    if settings.S2S_AUTH_REQUIRED and principal.kind != "api_key":
        return error_response(401, "invalid_api_key", "Controlling a call takes an API key.")
    core = runtime.current().calls.get(call_id)  # a live call's session, whichever transport carries it
    call = getattr(core, "transport", None)
    if not isinstance(call, SipCall):
        message = f"No SIP call with id '{call_id}' on this server." if core is None else "This is not a SIP call."
        return error_response(404, "call_not_found", message, "call_id")
    return call, principal


Action = Callable[[HttpRequest, SipCall, auth.Principal], Awaitable[None]]


def call_control(action: Action) -> Callable[[HttpRequest, str], Awaitable[HttpResponse]]:
    """The view of one control request: who asks and which call (:func:`_control`), then ``action``; its refusals
    become the API's JSON errors (400, 409), success a 200."""

    @csrf_exempt
    @require_POST
    @functools.wraps(action)
    async def view(request: HttpRequest, call_id: str) -> HttpResponse:
        found = await _control(request, call_id)
        if isinstance(found, HttpResponse):
            return found
        try:
            await action(request, *found)
        except BadRequest as exc:
            return error_response(400, "invalid_request", exc.message, exc.param)
        except BadOffer as exc:
            return error_response(400, exc.code, exc.message, exc.param)
        except CallStateError as exc:
            return error_response(409, "invalid_call_state", str(exc), "call_id")
        return HttpResponse(status=200)

    return view


def _body(request: HttpRequest) -> dict[str, Any]:
    if len(request.body) > MAX_BODY_BYTES:
        raise BadRequest(f"The request body is larger than {MAX_BODY_BYTES} bytes.")
    if not request.body.strip():
        return {}
    try:
        body = json.loads(request.body)
    except ValueError:
        raise BadRequest("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return body


@call_control
async def accept(request: HttpRequest, call: SipCall, principal: auth.Principal) -> None:
    """Answers a ringing call with a session configuration (``type: "realtime"``, as the API takes it)."""
    session = _body(request)
    if session.get("type", "realtime") != "realtime":
        raise BadRequest("A call is accepted with a realtime session ('type': 'realtime').", "type")
    session = {**call.config.session, **session}
    await sync_to_async(check_session)(session)
    await call.accept(session, principal.api_key_id)


@call_control
async def reject(request: HttpRequest, call: SipCall, principal: auth.Principal) -> None:
    """Declines a ringing call with a SIP status (603 Decline unless ``status_code`` says otherwise)."""
    status = _body(request).get("status_code", 603)
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 699:
        raise BadRequest("status_code must be a SIP final status from 400 to 699.", "status_code")
    await call.reject(status)


@call_control
async def refer(request: HttpRequest, call: SipCall, principal: auth.Principal) -> None:
    """Transfers an answered call: a REFER to the caller's side with ``Refer-To: target_uri``."""
    target = _body(request).get("target_uri")
    if not isinstance(target, str) or not TARGET_URI.match(target):
        raise BadRequest("target_uri must be a sip:, sips: or tel: URI.", "target_uri")
    call.refer(target)
    logger.info("SIP call %s: transferred to %s", call.id, target)
