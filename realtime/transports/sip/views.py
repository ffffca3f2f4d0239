"""The operator's control of a SIP call, as OpenAI's GA API has it: ``POST /v1/realtime/calls/{call_id}/accept``,
``/reject`` and ``/refer`` (``/hangup`` and ``DELETE`` are :mod:`realtime.transports.calls`', for WebRTC and SIP
calls alike: both are in ``Runtime.calls``). Allowed to whom the owner rule permits (:mod:`realtime.access.owner`).

The credentials and the body are checked here, where the request arrived; the action is decided where the call
is held (:func:`realtime.transports.sip.control.run`): on this process directly, on another one of the cluster
(behind a load balancer) through the channel layer, waiting up to ``S2S_CALL_CONTROL_TIMEOUT_S`` for its answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from realtime.access import owner
from realtime.access.owner import Caller
from realtime.transports.calls import auth_refused, control_answered, error_response, reach_call
from realtime.transports.sip.control import BadRequest

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024


def _number(text: str) -> int:
    """A JSON integer the channel layer can carry (msgpack: 64 bits), so a request is refused alike wherever
    its call is held."""
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise BadRequest("A number in the request body is out of range.")
    return value


def _body(request: HttpRequest) -> dict[str, Any]:
    if len(request.body) > MAX_BODY_BYTES:
        raise BadRequest(f"The request body is larger than {MAX_BODY_BYTES} bytes.")
    if not request.body.strip():
        return {}
    try:
        body = json.loads(request.body, parse_int=_number)
    except (ValueError, RecursionError):
        raise BadRequest("The request body is not valid JSON (or is nested too deep).") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return body


def call_control(action: str) -> Callable[[HttpRequest, str], Coroutine[Any, Any, HttpResponse]]:
    """The view of one control action: who asks, the body, then the action where the call is held
    (:func:`realtime.transports.sip.control.run`); a 200, or its refusal as the API's JSON error."""

    @csrf_exempt
    @require_POST
    @owner.route(auth_refused)
    async def view(request: HttpRequest, call_id: str, caller: Caller) -> HttpResponse:
        try:
            body = _body(request)
        except BadRequest as exc:
            return error_response(400, "invalid_request", exc.message, exc.param)
        answer = await reach_call(call_id, action, body, caller)
        return control_answered(answer, HttpResponse(status=200))

    view.__name__ = view.__qualname__ = action
    return view


accept = call_control("accept")  # answers a ringing call with a session configuration
reject = call_control("reject")  # declines a ringing call (status_code, 603 by default)
refer = call_control("refer")  # transfers an answered call (target_uri)
