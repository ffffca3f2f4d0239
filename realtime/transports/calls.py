"""WebRTC signalling as OpenAI's GA API does it: ``POST /v1/realtime/calls`` with an SDP offer.

The body is the offer itself (``Content-Type: application/sdp``) or a multipart form with
``sdp`` and ``session`` (settings applied before the first event). The answer is
``201`` with the SDP answer and ``Location: /v1/realtime/calls/{call_id}``;
``DELETE`` on that location (or ``POST .../hangup``) hangs up. Credentials are those of
the WebSocket: an API key, or an ``ek_`` client secret (the browser's way), checked
before a unit is claimed; a unit is claimed before the answer is sent.
"""

from __future__ import annotations

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
from realtime.access import auth
from realtime.models import Prompt, Transport
from realtime.node import runtime
from realtime.node.cluster import hang_up_elsewhere
from realtime.protocol.core import AUTH_STATUS, OpenRequest
from realtime.protocol.transport import CLOSE_POLICY, Refusal
from realtime.protocol.events import EventError, error_event
from realtime.protocol.session import SessionConfig
from realtime.transports.webrtc import WebRTCCall

logger = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls/"
AUDIO_CODECS = {"audio/opus", "audio/pcmu", "audio/pcma", "audio/g722"}  # what aiortc encodes and decodes


class BadOffer(Exception):
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


def read_offer(request: HttpRequest) -> tuple[str, dict[str, Any] | None]:
    """(the SDP offer, the session settings or None) from either body shape; raises :class:`BadOffer`."""
    length = int(request.headers.get("Content-Length") or 0)
    if length > settings.S2S_MAX_SDP_BYTES * 4:
        raise BadOffer(f"The request body is larger than {settings.S2S_MAX_SDP_BYTES * 4} bytes.", None)
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
            except ValueError:
                raise BadOffer("The 'session' field is not valid JSON.", "session") from None
    else:
        try:
            sdp = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadOffer("The SDP offer is not UTF-8 text.") from None
    if session is not None and not isinstance(session, dict):
        raise BadOffer("The 'session' field must be a JSON object.", "session")
    check_sdp(sdp)
    return sdp, session


def _form_field(request: HttpRequest, name: str) -> str | None:
    """A form field, sent as a plain field or as a file part (clients attach the SDP either way)."""
    if name in request.POST:
        return request.POST[name]
    upload = request.FILES.get(name)
    if upload is None:
        return None
    return upload.read(settings.S2S_MAX_SDP_BYTES * 4 + 1).decode("utf-8")


def check_sdp(sdp: str) -> None:
    """An offer this server can answer: parsable SDP, an audio m-line with a codec aiortc has, ICE and DTLS
    credentials on every m-line (aiortc itself would take an offer without a fingerprint)."""
    if len(sdp.encode()) > settings.S2S_MAX_SDP_BYTES:
        raise BadOffer(f"The SDP offer is larger than {settings.S2S_MAX_SDP_BYTES} bytes.")
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


async def _read_call(request: HttpRequest, call: WebRTCCall) -> dict[str, Any] | None:
    """The offer read, checked and applied once the credentials passed (before any claim); returns the call's
    settings; raises :class:`Refusal` (a 400)."""
    try:
        sdp, call_config = read_offer(request)
        await sync_to_async(check_session)(call_config)
    except BadOffer as exc:
        raise Refusal(exc.code, exc.message, CLOSE_POLICY, "Bad offer", http_status=400, param=exc.param) from None
    try:
        await call.accept_offer(sdp)
    except Exception as exc:  # aiortc refused what the parser let through
        logger.info("call %s: unusable offer: %s", call.id, exc)
        message = f"The SDP offer cannot be answered: {exc}."
        raise Refusal("invalid_offer", message, CLOSE_POLICY, "Bad offer", http_status=400, param="sdp") from None
    return call_config


@csrf_exempt
@require_http_methods(["POST"])
async def create_call(request: HttpRequest) -> HttpResponse:
    """``POST /v1/realtime/calls``: authenticate, check the offer, claim a unit, answer (201)."""
    call = WebRTCCall(new_id("rtc"), runtime.current())
    open_request = OpenRequest(
        transport=Transport.WEBRTC,
        scope=request.scope,
        client_addr=str(request.META.get("REMOTE_ADDR") or ""),
        user_agent=request.headers.get("User-Agent", ""),
        prepare=lambda: _read_call(request, call),
    )
    try:
        answer = await call.answer(open_request)
    except Refusal as refusal:
        await call.discard()
        logger.info("call %s refused: %s", call.id, refusal.code)
        return error_response(refusal.http_status, refusal.code, refusal.message, refusal.param, refusal.error_type)
    except Exception:  # the unit went back in answer(); the client hears why, not an HTML page
        logger.exception("call %s: could not answer", call.id)
        await call.discard()
        return error_response(
            500, "server_error", "The server could not answer this call. Try again.", error_type="server_error"
        )
    assert call.core is not None
    logger.info("call %s: session %s answered (%s)", call.id, call.core.id, call.core.opening.principal or "anonymous")
    response = HttpResponse(answer, status=201, content_type="application/sdp")
    response["Location"] = CALLS_PATH + call.id
    return response


@csrf_exempt
@require_http_methods(["DELETE", "POST"])
async def hang_up(request: HttpRequest, call_id: str) -> HttpResponse:
    """``DELETE /v1/realtime/calls/{call_id}`` (or ``POST .../hangup``): ends the call.

    Allowed to an API key, or to the credential that opened the call (a browser's spent ``ek_`` secret).
    A call held by another process of the cluster (behind a load balancer) is reached through the
    channel layer; that answer cannot know whether the call still existed.
    """
    done = HttpResponse(status=200 if request.method == "POST" else 204)
    call = runtime.current().calls.get(call_id)
    authorization = request.headers.get("Authorization", "")
    token = auth.bearer_token(authorization) if authorization else None
    credential = auth.hash_token(token) if token else ""
    if call is not None and (not settings.S2S_AUTH_REQUIRED or (token and credential == call.credential)):
        await call.hang_up()
        return done
    if token is not None and token.startswith(auth.SECRET_PREFIX) and settings.S2S_AUTH_REQUIRED:
        if call is None and settings.REDIS_URL and await hang_up_elsewhere(call_id, credential):  # on another node
            return done
        return error_response(
            401,
            "invalid_api_key",
            "Send an API key, or the credential that opened the call, as 'Authorization: Bearer KEY'.",
        )
    try:
        await auth.authenticate_request(request.scope, authorization, "")
    except auth.AuthError as exc:
        return error_response(AUTH_STATUS.get(exc.code, 503), exc.code, exc.message, error_type=exc.error_type)
    if call is not None:
        await call.hang_up()
        return done
    if settings.REDIS_URL and await hang_up_elsewhere(call_id, ""):  # another process of the cluster may hold it
        return done
    return error_response(404, "call_not_found", f"No live call with id '{call_id}' on this server.", "call_id")
