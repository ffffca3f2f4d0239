"""WebRTC signalling as OpenAI's GA API does it: ``POST /v1/realtime/calls`` with an SDP offer (a voice agent's
call), and ``POST /v1/realtime/translations/calls`` (a translation's, the same way).

The body is the offer itself (``Content-Type: application/sdp``) or a multipart form with
``sdp`` and ``session`` (settings applied before the first event). The answer is
``201`` with the SDP answer and ``Location: /v1/realtime/calls/{call_id}``;
``DELETE`` on that location (or ``POST .../hangup``) hangs up (:func:`realtime.transports.calls.hang_up`,
for SIP calls too). Credentials are those of
the WebSocket: an API key, or an ``ek_`` client secret (the browser's way), checked
before a unit is claimed; a unit is claimed before the answer is sent.

Every refusal before the claim is a JSON 400, 413 or 429 that gives a spent ``ek_`` secret back, in
order of cost: the offer rate of the client address and a full pool (before the credentials), then,
once they passed, the key's offer rate and live calls (:mod:`realtime.access.rate`), the body (capped
as it arrived: :mod:`realtime.server.body_limit`), the offer's size and line counts
(:mod:`realtime.transports.webrtc.offer_limits`), then the parse, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiortc.sdp import SessionDescription
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from pipelines.ids import new_id
from realtime.access.auth import Principal
from realtime.access.rate import Limited
from realtime.live.core import open_session
from realtime.live.opening import OpenRequest, session_limit
from realtime.live.translation import open_translation
from realtime.live.transport import Refusal
from realtime.models import TransportKind
from realtime.node import runtime
from realtime.node.runtime import Runtime
from realtime.protocol.close_codes import CLOSE_POLICY
from realtime.transports.calls import BadOffer, check_session, check_translation, error_response
from realtime.transports.webrtc import offer_limits
from realtime.transports.webrtc.call import Opener, WebRTCCall

logger = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls/"
AUDIO_CODECS = {"audio/opus", "audio/pcmu", "audio/pcma", "audio/g722"}  # what aiortc encodes and decodes


def rate_limited(limited: Limited) -> JsonResponse:
    response = error_response(429, "rate_limit_exceeded", limited.message, error_type="rate_limit_error")
    response["Retry-After"] = str(max(1, limited.retry_after_s))
    return response


def too_many(limited: Limited) -> Refusal:
    """A limit of the key or of live calls, met once the credentials passed: the core gives the secret back."""
    return Refusal("rate_limit_exceeded", limited.message, CLOSE_POLICY, "Rate limit", "rate_limit_error", 429)


def pool_full(rt: Runtime) -> Refusal | None:
    """The refusal a claim would meet now, when the pool is up and has no unit free or draining (one that drains
    is waited for, as a reconnect): checked before the credentials and the body (the claim itself stays the one
    atomic check)."""
    if rt.pool is not None and rt.pool.warm and rt.pool.full():
        return session_limit()
    return None


def read_offer(request: HttpRequest) -> tuple[str, dict[str, Any] | None]:
    """(the SDP offer, the session settings or None) from either body shape, its size and lines checked
    (:func:`offer_limits.check`) and not yet parsed; raises :class:`BadOffer`. The body was capped as it
    arrived (:mod:`realtime.server.body_limit`)."""
    content_type = request.content_type or ""
    session: Any = None
    if content_type.startswith("multipart/form-data") or content_type == "application/x-www-form-urlencoded":
        try:
            sdp, session = _form_field(request, "sdp"), _form_field(request, "session")
        except UnicodeDecodeError:
            raise BadOffer("The form's fields are not UTF-8 text.", None) from None
        except Exception as exc:  # a malformed multipart body
            raise BadOffer(f"The form could not be read: {exc}", None) from None
        if not sdp:
            raise BadOffer("The form has no 'sdp' field with the SDP offer.")
        if session:
            try:
                session = json.loads(session)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
                raise BadOffer("The 'session' field is not valid JSON (or is nested too deep).", "session") from None
    else:
        try:
            sdp = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadOffer("The SDP offer is not UTF-8 text.") from None
    if session is not None and not isinstance(session, dict):
        raise BadOffer("The 'session' field must be a JSON object.", "session")
    offer_limits.check(sdp, offer_limits.OfferCaps.from_settings())
    return sdp, session


def _form_field(request: HttpRequest, name: str) -> str | None:
    """A form field, sent as a plain field or as a file part (clients attach the SDP either way)."""
    if name in request.POST:
        return request.POST[name]
    upload = request.FILES.get(name)
    if upload is None:
        return None
    return upload.read(settings.S2S_MAX_CALL_BODY_BYTES + 1).decode("utf-8")


def check_sdp(sdp: str) -> None:
    """An offer this server can answer: parsable SDP, an audio m-line with a codec aiortc has, ICE and DTLS
    credentials on every m-line (aiortc itself would take an offer without a fingerprint). Sync and
    CPU-bound: run it off the event loop, after :func:`read_offer` counted the lines."""
    if not sdp.lstrip().startswith("v=0"):
        raise BadOffer(
            "The body is not an SDP offer (it must start with 'v=0'): send the offer as "
            "'Content-Type: application/sdp', or as the 'sdp' field of a multipart form."
        )
    try:
        parsed = SessionDescription.parse(sdp)
    except Exception as exc:
        raise BadOffer(f"The SDP offer could not be parsed: {exc or type(exc).__name__}.") from None
    audio = [media for media in parsed.media if media.kind == "audio"]
    if not audio:
        raise BadOffer(
            "The SDP offer has no audio m-line: add a microphone track (or a recvonly audio "
            "transceiver) before creating the offer."
        )
    if not any(codec.mimeType.lower() in AUDIO_CODECS for media in audio for codec in media.rtp.codecs):
        raise BadOffer("The SDP offer's audio offers none of the codecs this server speaks (Opus, PCMU, PCMA, G722).")
    for media in parsed.media:
        if media.dtls is None or not media.dtls.fingerprints:
            raise BadOffer(f"The SDP offer's {media.kind} m-line has no DTLS fingerprint (a=fingerprint).")
        if media.ice is None or not media.ice.usernameFragment or not media.ice.password:
            raise BadOffer(f"The SDP offer's {media.kind} m-line has no ICE credentials (a=ice-ufrag, a=ice-pwd).")


async def _read_call(
    request: ASGIRequest, call: WebRTCCall, principal: Principal, check: Callable[[dict[str, Any] | None], None]
) -> dict[str, Any] | None:
    """The key's limits, then the offer read, checked and applied, once the credentials passed (before any
    claim); returns the call's settings (checked by ``check``, as its kind of session takes them); raises
    :class:`Refusal` (a 429 or a 400)."""
    rt, address, key = call.runtime, call.address, str(principal.api_key_id or "")
    limited = rt.call_limits.offer_by(key) or rt.call_limits.live_calls(
        ((live.client_addr, str(live.owner.api_key_id or "")) for live in rt.calls.values()), address, key
    )
    if limited is not None:
        raise too_many(limited)
    try:
        sdp, call_config = read_offer(request)
        await asyncio.to_thread(check_sdp, sdp)
        await sync_to_async(check)(call_config)
    except BadOffer as exc:
        raise Refusal(exc.code, exc.message, CLOSE_POLICY, "Bad offer", http_status=400, param=exc.param) from None
    if not offer_limits.local_targets_allowed(request.scope.get("server")):
        sdp, dropped = offer_limits.without_local_candidates(sdp)
        if dropped:
            logger.info("call %s: dropped %s candidates on loopback or link-local addresses", call.id, dropped)
    try:
        await call.accept_offer(sdp)
    except Exception as exc:  # aiortc refused what the parser let through
        logger.info("call %s: unusable offer: %s", call.id, exc)
        message = f"The SDP offer cannot be answered: {exc}."
        raise Refusal("invalid_offer", message, CLOSE_POLICY, "Bad offer", http_status=400, param="sdp") from None
    return call_config


@csrf_exempt
@require_http_methods(["POST"])
async def create_call(request: ASGIRequest) -> HttpResponse:
    """``POST /v1/realtime/calls``: a voice agent's call."""
    return await answer_call(request, open_session, check_session)


@csrf_exempt
@require_http_methods(["POST"])
async def create_translation_call(request: ASGIRequest) -> HttpResponse:
    """``POST /v1/realtime/translations/calls``: a translation's call, as OpenAI's guide has it (the source speech
    on the client's track, the translated speech on the answer's, the translation's events on ``oai-events``); its
    credentials a translation's (an API key, or a client secret minted for a translation)."""
    return await answer_call(request, open_translation, check_translation)


async def answer_call(
    request: ASGIRequest, opener: Opener, check: Callable[[dict[str, Any] | None], None]
) -> HttpResponse:
    """Meter, authenticate, check the offer, claim a unit, answer (201), for either kind of call."""
    rt = runtime.current()
    call = WebRTCCall(new_id("rtc"), rt, str(request.META.get("REMOTE_ADDR") or ""), opener)
    limited = rt.call_limits.offer_from(call.address)  # before anything costs: no database, no parsing
    if limited is not None:
        await call.discard()
        return rate_limited(limited)
    full = pool_full(rt)
    if full is not None:
        await call.discard()
        rt.session_refused(full.code, full.close_code)
        return error_response(full.http_status, full.code, full.message, error_type=full.error_type)
    open_request = OpenRequest(
        transport=TransportKind.WEBRTC,
        scope=request.scope,
        client_addr=call.address,
        user_agent=request.headers.get("User-Agent", ""),
        prepare=lambda principal: _read_call(request, call, principal, check),
    )
    try:
        answer = await call.answer(open_request)
    except Refusal as refusal:
        await call.discard()
        logger.info("call %s refused: %s", call.id, refusal.code)
        return error_response(refusal.http_status, refusal.code, refusal.message, refusal.param, refusal.error_type)
    except Exception as exc:  # the unit and the secret went back; what aiortc could not answer is the offer's
        logger.warning("call %s: could not answer the offer: %r", call.id, exc)
        await call.discard()
        return error_response(400, "invalid_offer", f"The SDP offer cannot be answered: {exc!r}.", "sdp")
    assert call.core is not None
    logger.info("call %s: session %s answered (%s)", call.id, call.core.id, call.core.opening.principal or "anonymous")
    response = HttpResponse(answer, status=201, content_type="application/sdp")
    response["Location"] = CALLS_PATH + call.id  # hung up there, whichever kind it is
    return response
