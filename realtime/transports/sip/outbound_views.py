"""``POST /v1/realtime/calls`` with ``{"sip": {...}}`` (the agent places a phone call) and ``GET`` of its record.

The checks run in order of cost, and none lets a packet leave for a target it refuses: an API key (a client
secret may not dial: 403), the body (400: a target or header that would inject anything), the allow-list
(403 ``outbound_not_allowed``, ``param: "sip.to"``), the key's caps (429), the session's settings (400), the
claim (429 ``session_limit_reached``: nothing dialled). Then the INVITE, and ``201`` with the call's record and
``Location: /v1/realtime/calls/{id}``. The key owns the call: to another the call does not exist (404).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse

from realtime.access import auth
from realtime.access.owner import Caller, Owner
from realtime.live.opening import OpenRequest
from realtime.live.transport import ControlAnswer, Refusal
from realtime.models import TransportKind
from realtime.node import runtime
from realtime.transports.calls import BadOffer, auth_refused, check_session, control_answered, error_response
from realtime.transports.sip import dialling, guard
from realtime.transports.sip.dialling import BadTarget
from realtime.transports.sip.outbound import CallRecord, Dialler, OutboundCall
from realtime.transports.sip.signalling import SipListener

logger = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls/"
MAX_BODY_BYTES = 256 * 1024


def dialler() -> Dialler | None:
    """This process's SIP listener's dialler (None: no SIP listener)."""
    return next((item.dialler for item in runtime.current().listeners if isinstance(item, SipListener)), None)


def refused(exc: BadTarget) -> JsonResponse:
    if exc.status == 429:  # a key's cap: retried after a minute at most
        limited = error_response(429, exc.code, exc.message, error_type="rate_limit_error")
        limited["Retry-After"] = "60"
        return limited
    return error_response(exc.status, exc.code, exc.message, exc.param)


async def next_hop(target: dialling.Target, proxy: tuple[str, int, str] | None) -> tuple[tuple[str, int], str]:
    """Where the INVITE goes and over what: the trunk's proxy, or the target's host (a name is resolved) over the
    target's transport; raises BadTarget."""
    host, port, transport = proxy or (*target.host_port, target.transport)
    if target.secure and transport != "tls":
        raise BadTarget(
            "sip.to: a sips: target needs TLS to the trunk (S2S_SIP_OUTBOUND_PROXY ;transport=tls).", "sip.to"
        )
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        raise BadTarget(f"sip.to: the host {host[:100]!r} cannot be resolved.", "sip.to") from None
    address = guard.destination((str(found[0][4][0]), port)) if found else None
    if address is None:
        raise BadTarget("sip.to: the host is not an address this server can send to.", "sip.to")
    return address, transport


async def _principal(request: HttpRequest) -> auth.Principal:
    """The API key that asks; raises ``auth.AuthError`` or :class:`BadTarget` (a client secret: 403)."""
    authorization = request.headers.get("Authorization", "")
    token = auth.bearer_token(authorization) if authorization else None
    if token and token.startswith(auth.SECRET_PREFIX):
        raise BadTarget("A client secret cannot place calls: use an API key.", "sip", "invalid_api_key", 403)
    scope = getattr(request, "scope", None) or {}
    return await auth.authenticate_request(scope, authorization, "outbound")


async def dial(request: ASGIRequest) -> HttpResponse:
    """``POST /v1/realtime/calls`` with a JSON body naming ``sip.to``: places the call (201), or says why not."""
    try:
        principal = await _principal(request)
    except auth.AuthError as exc:
        return auth_refused(exc)
    except BadTarget as exc:
        return refused(exc)
    authorization = request.headers.get("Authorization", "")
    owner = Owner.of(auth.bearer_token(authorization) if authorization else None, principal)
    try:
        if len(request.body) > MAX_BODY_BYTES:
            raise BadTarget(f"The request body is larger than {MAX_BODY_BYTES} bytes.", "sip")
        try:
            body = json.loads(request.body or b"null")
        except (ValueError, RecursionError):
            raise BadTarget("The request body is not valid JSON (or is nested too deep).", "sip") from None
        record = await place(body, principal, owner, request.headers.get("User-Agent", ""))
    except BadTarget as exc:
        return refused(exc)
    except BadOffer as exc:
        return error_response(400, exc.code, exc.message, exc.param)
    except Refusal as refusal:
        return error_response(refusal.http_status, refusal.code, refusal.message, refusal.param, refusal.error_type)
    response = JsonResponse(record.as_json(), status=201)
    response["Location"] = CALLS_PATH + record.id
    return response


async def place(
    body: Any, principal: auth.Principal, owner: Owner, user_agent: str, speak_first: bool = False
) -> CallRecord:
    """Places the call a request's JSON body asks for, by ``principal`` (an API key, or staff in the admin), owned by
    ``owner``: the body, the allow-list, the caps, the session, the claim, in that order, then the INVITE (and, with
    ``speak_first``, a ``response.create``: the agent speaks as soon as the callee answers). Raises
    :class:`BadTarget` (400, 403, 429: nothing sent), ``BadOffer`` (the session's settings), ``Refusal`` (the pool)."""
    placer = dialler()
    target, session = dialling.read(body)
    if placer is None:
        raise BadTarget("This server has no SIP listener (S2S_SIP_BIND).", "sip.to", "outbound_not_allowed", 403)
    dialling.check_allowed(target.to, placer.config.outbound_allow)
    why = placer.limited(principal.api_key_id)
    if why is not None:
        raise BadTarget(why, "sip", "rate_limit_exceeded", 429)
    await sync_to_async(check_session)(session)
    remote, transport = await next_hop(target, placer.config.outbound_proxy)
    if transport not in placer.uacs:
        raise BadTarget(
            f"sip.to: this server does not listen for SIP over {transport.upper()} (S2S_SIP_TLS_BIND).", "sip.to"
        )
    call = OutboundCall(placer, runtime.current(), target, remote, owner, transport)
    open_request = OpenRequest(
        transport=TransportKind.SIP,
        principal=principal,
        model=(session or {}).get("model") or None,
        client_addr=call.client_addr,
        user_agent=user_agent,
        call_id=call.id,
        call_config=session,
        owner=owner,
    )
    try:
        await call.dial(open_request)
    except Refusal as refusal:
        logger.info("SIP outbound call %s refused: %s", call.id, refusal.code)
        raise
    if speak_first:
        await call.speak_first()
    logger.info("SIP outbound call %s to %s placed by %s", call.id, target.to, principal.name or "anonymous")
    return call.record


async def status(call_id: str, caller: Caller) -> HttpResponse:
    """``GET /v1/realtime/calls/{id}``: the record of an outbound call, to its owner; to anyone else 404."""
    placer = dialler()
    record = placer.record(call_id) if placer is not None else None
    if record is None or not (record.owner.may_reach(caller) or record.owner.reads(caller)):
        return control_answered(ControlAnswer.not_found(call_id), HttpResponse())
    return JsonResponse(record.as_json())
