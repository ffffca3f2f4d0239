"""WebRTC signalling as OpenAI's GA API does it: ``POST /v1/realtime/calls`` with an SDP offer.

The body is the offer itself (``Content-Type: application/sdp``) or a multipart form with
``sdp`` and ``session`` (settings applied before the first event). The answer is
``201`` with the SDP answer and ``Location: /v1/realtime/calls/{call_id}``;
``DELETE`` on that location (or ``POST .../hangup``) hangs up. Credentials are those of
the WebSocket: an API key, or an ``ek_`` client secret (the browser's way), checked
before a unit is claimed; a unit is claimed before the answer is sent.

Every refusal before the claim is a JSON 400, 413 or 429 that gives a spent ``ek_`` secret back, in
order of cost: the offer rate of the client address, a full pool, the credentials, the key's offer
rate and live calls (:mod:`realtime.access.rate`), the body (capped as it arrives:
:mod:`s2s_project.body_limit`), the offer's line counts (:mod:`realtime.transports.offer_limits`),
then the parse, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiortc.sdp import SessionDescription
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from pipelines.ids import new_id
from realtime.access import auth, call_owner
from realtime.access.rate import Limited
from realtime.node import runtime
from realtime.node.runtime import Runtime
from realtime.protocol.core import CLOSE_POLICY, SESSION_LIMIT_REASON, Opening, Refusal, refuse
from realtime.protocol.events import EventError, error_event
from realtime.models import Prompt, Transport
from realtime.protocol.session import SessionConfig
from realtime.transports import offer_limits
from realtime.transports.offer_limits import BadOffer
from realtime.transports.webrtc import WebRTCCall, hang_up_elsewhere

logger = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls/"
# Refusals of the pool as HTTP statuses: a full pool is a rate limit, a starting or stopping server unavailable.
REFUSAL_STATUS = {"session_limit_reached": 429}
AUTH_STATUS = {"invalid_api_key": 401, "invalid_origin": 403}
AUDIO_CODECS = {"audio/opus", "audio/pcmu", "audio/pcma", "audio/g722"}  # what aiortc encodes and decodes


def error_response(
    status: int, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error"
) -> JsonResponse:
    """The same error object as the WebSocket's ``error`` event, as the body of an HTTP error."""
    response = JsonResponse(error_event(code, message, param, None, error_type), status=status)
    if status in (429, 503):
        response["Retry-After"] = "1"
    return response


def rate_limited(limited: Limited) -> JsonResponse:
    response = error_response(429, "rate_limit_exceeded", limited.message, error_type="rate_limit_error")
    response["Retry-After"] = str(max(1, limited.retry_after_s))
    return response


def refused(rt: Runtime, opening: Opening, refusal: Refusal) -> JsonResponse:
    """A refusal of the pool as its HTTP status, counted as the WebSocket's are."""
    refuse(rt, opening, refusal)
    status = REFUSAL_STATUS.get(refusal.code, 503)
    error_type = "invalid_request_error" if refusal.close_code == CLOSE_POLICY else "server_error"
    return error_response(status, refusal.code, refusal.message, error_type=error_type)


def pool_full(rt: Runtime) -> Refusal | None:
    """The refusal a claim would meet now, when the pool is up and has no free unit (checked before anything
    is read or parsed; the claim itself stays the one atomic check)."""
    if rt.pool is not None and rt.pool.warm and rt.pool.free_units() == 0:
        return Refusal("session_limit_reached", SESSION_LIMIT_REASON, CLOSE_POLICY, SESSION_LIMIT_REASON)
    return None


def read_offer(request: HttpRequest) -> tuple[str, dict[str, Any] | None]:
    """(the SDP offer, the session settings or None) from either body shape, its lines counted and not yet
    parsed; raises :class:`BadOffer`. The body was capped as it arrived (:mod:`s2s_project.body_limit`)."""
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
    if len(sdp.encode()) > settings.S2S_MAX_SDP_BYTES:
        raise BadOffer(f"The SDP offer is larger than {settings.S2S_MAX_SDP_BYTES} bytes.")
    offer_limits.check_counts(sdp, offer_limits.OfferCaps.from_settings())
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


def _model(*configs: dict[str, Any] | None) -> str:
    for config in reversed(configs):
        if config and isinstance(config.get("model"), str) and config["model"]:
            return config["model"]
    return settings.S2S_DEFAULT_MODEL


@csrf_exempt
@require_http_methods(["POST"])
async def create_call(request: HttpRequest) -> HttpResponse:
    """``POST /v1/realtime/calls``: meter, authenticate, check the offer, claim a unit, answer (201)."""
    session_id, call_id = new_id("sess"), new_id("rtc")
    rt = runtime.current()
    address = str(request.META.get("REMOTE_ADDR") or "")
    opening = Opening(
        session_id=session_id,
        model=settings.S2S_DEFAULT_MODEL,
        transport=Transport.WEBRTC,
        client_addr=address,
        user_agent=request.headers.get("User-Agent", "")[:500],
    )
    limited = rt.call_limits.offer_from(address)  # before anything costs: no database, no parsing
    if limited is not None:
        return rate_limited(limited)
    full = pool_full(rt)
    if full is not None:
        return refused(rt, opening, full)
    authorization = request.headers.get("Authorization", "")
    try:  # before any claim: a request without valid credentials never holds a unit
        principal = await auth.authenticate_request(request.scope, authorization, session_id)
    except auth.AuthError as exc:
        logger.info("call %s refused: %s", call_id, exc.code)
        return error_response(AUTH_STATUS.get(exc.code, 503), exc.code, exc.message, error_type=exc.error_type)

    def give_back() -> None:
        rt.writer.submit(lambda: auth.give_back_secret(principal))

    key = str(principal.api_key_id or "")
    limited = rt.call_limits.offer_by(key) or rt.call_limits.live_calls(
        ((call.address, str(call.owner.api_key_id or "")) for call in rt.calls.values()), address, key
    )
    if limited is not None:
        give_back()
        return rate_limited(limited)
    try:
        sdp, call_config = read_offer(request)
        await asyncio.to_thread(check_sdp, sdp)
        await sync_to_async(check_session)(call_config)
    except BadOffer as exc:
        give_back()
        return error_response(400, exc.code, exc.message, exc.param)
    if not offer_limits.local_targets_allowed(request.scope.get("server")):
        sdp, dropped = offer_limits.without_local_candidates(sdp)
        if dropped:
            logger.info("call %s: dropped %s candidates on loopback or link-local addresses", call_id, dropped)
    principal_name = f"{principal.kind}:{principal.name}"[:200] if principal.name else ""
    opening = Opening(
        **{
            **opening.__dict__,
            "principal": principal_name,
            "model": _model(principal.session_config, call_config),
            "session_config": principal.session_config or None,
            "call_config": call_config,
        }
    )
    token = auth.bearer_token(authorization) if authorization else None
    call = WebRTCCall(call_id, rt, call_owner.CallOwner.of(token, principal), address)
    try:
        await call.accept_offer(sdp)
    except Exception as exc:  # aiortc refused what the parser let through
        await call.discard()
        give_back()
        logger.info("call %s: unusable offer: %s", call_id, exc)
        return error_response(400, "invalid_offer", f"The SDP offer cannot be answered: {exc}.", "sdp")
    try:
        answer = await call.answer(rt, opening)
    except Refusal as refusal:
        await call.discard()
        give_back()
        return refused(rt, opening, refusal)
    except Exception as exc:  # the unit went back in answer(); what aiortc could not answer is the offer's
        give_back()
        logger.warning("call %s: could not answer the offer: %r", call_id, exc)
        return error_response(400, "invalid_offer", f"The SDP offer cannot be answered: {exc!r}.", "sdp")
    used_at = call.core.started_at  # type: ignore[union-attr]
    rt.writer.submit(lambda: auth.mark_used(principal, used_at))
    logger.info("call %s: session %s answered (%s)", call_id, session_id, principal_name or "anonymous")
    response = HttpResponse(answer, status=201, content_type="application/sdp")
    response["Location"] = CALLS_PATH + call_id
    return response


@csrf_exempt
@require_http_methods(["DELETE", "POST"])
async def hang_up(request: HttpRequest, call_id: str) -> HttpResponse:
    """``DELETE /v1/realtime/calls/{call_id}`` (or ``POST .../hangup``): ends the call.

    Allowed to the credentials that opened the call, the same API key's, and staff
    (:mod:`realtime.access.call_owner`); to anyone else the call does not exist. A call held by another
    process of the cluster (behind a load balancer) is asked through the channel layer, and decides there;
    that answer cannot know whether the call still existed.
    """
    try:
        caller = await call_owner.identify(request)
    except auth.AuthError as exc:
        return error_response(AUTH_STATUS.get(exc.code, 503), exc.code, exc.message, error_type=exc.error_type)
    call = runtime.current().calls.get(call_id)
    if call is not None and call.owner.allows(caller):
        await call.hang_up()
        return HttpResponse(status=200 if request.method == "POST" else 204)
    if call is None and settings.REDIS_URL and await hang_up_elsewhere(call_id, caller.as_message()):
        return HttpResponse(status=200 if request.method == "POST" else 204)
    return error_response(404, "call_not_found", f"No live call with id '{call_id}' that you may end here.", "call_id")
