"""The two call URLs that carry more than one kind of call: ``POST /v1/realtime/calls`` (a WebRTC offer, or a
JSON body naming a phone number to call) and ``/v1/realtime/calls/{call_id}`` (``GET``: an outbound call's
record; ``DELETE``, ``POST``: the hang-up of any call). Here because ``webrtc/`` and ``sip/`` never import
each other.
"""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from realtime.access import owner
from realtime.access.owner import Caller
from realtime.transports.calls import auth_refused, control_answered, reach_call
from realtime.transports.sip import outbound_views
from realtime.transports.webrtc import views as webrtc_views


@csrf_exempt
@require_http_methods(["POST"])
async def create_call(request: ASGIRequest) -> HttpResponse:
    """``POST /v1/realtime/calls``: ``application/json`` places a phone call, anything else is a WebRTC offer."""
    if request.content_type == "application/json":
        return await outbound_views.dial(request)
    return await webrtc_views.create_call(request)


@csrf_exempt
@require_http_methods(["GET", "DELETE", "POST"])
@owner.route(auth_refused)
async def call(request: HttpRequest, call_id: str, caller: Caller) -> HttpResponse:
    """``GET``: an outbound call's record (:func:`outbound_views.status`); ``DELETE`` (or ``POST``, as
    ``/hangup``): ends the call wherever it is held (CANCEL while an outbound call rings, BYE once answered)."""
    if request.method == "GET":
        return await outbound_views.status(call_id, caller)
    answer = await reach_call(call_id, "hangup", {}, caller)
    return control_answered(answer, HttpResponse(status=200 if request.method == "POST" else 204))
