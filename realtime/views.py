"""HTTP views: the browser client page, a session's per-turn timings, and the health probes."""

from __future__ import annotations

import hmac
import json
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse
from django.views.decorators.http import require_GET

from pipelines.config import SPEED_RANGE, EngineConfig
from pipelines.translation import target_languages
from pipelines.translation_targets import language_name
from realtime.access import auth, owner
from realtime.access.owner import Caller, Owner
from realtime.audit import metrics as metrics_exposition
from realtime.live.opening import AUTH_STATUS
from realtime.models import RealtimeSession, ResponseRecord, Stage
from realtime.node import channel_layer, runtime
from realtime.protocol import translation
from realtime.protocol.session import render as session_render
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.session.keys import NOISE_REDUCTION_TYPES

REALTIME_PATH = "/v1/realtime"
CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets"
CALLS_PATH = "/v1/realtime/calls"
SLOTS_PATH = "/v1/realtime/slots"
TRANSLATION_PATH = f"/v1/realtime/translations?model={translation.DEFAULT_MODEL}"
TRANSLATION_SECRETS_PATH = "/v1/realtime/translations/client_secrets"
TRANSLATION_CALLS_PATH = "/v1/realtime/translations/calls"


def index(request: HttpRequest) -> HttpResponse:
    """The browser client. No key is put in the page: it asks for a short-lived client secret.

    With authentication off, or no client-secrets endpoint, the page connects without a
    secret (it also copes with a 404). With it on, only a signed-in staff user may mint
    secrets (``realtime.access.views``); anyone else is shown where to sign in. Its Translate mode
    (``static/realtime/translate.js``) mints its secrets at the translation's route, which open a translation only.
    """
    secrets_url = translation_secrets_url = sign_in_url = ""
    if settings.S2S_AUTH_REQUIRED and _routed(CLIENT_SECRETS_PATH):
        if request.user.is_authenticated and request.user.is_staff:
            secrets_url = CLIENT_SECRETS_PATH
            translation_secrets_url = TRANSLATION_SECRETS_PATH if _routed(TRANSLATION_SECRETS_PATH) else ""
        else:
            sign_in_url = f"{reverse('admin:login')}?next={request.path}"
    context = {
        "realtime_path": REALTIME_PATH,
        "client_secrets_url": secrets_url,
        "sign_in_url": sign_in_url,
        "voices": installed_voices(settings.S2S_POOL.engines),
        "voice_aliases": ", ".join(settings.S2S_POOL.engines.voices),
        "speed_range": SPEED_RANGE,
        "timings_url": TIMINGS_PATH,
        "calls_url": CALLS_PATH if _routed(CALLS_PATH) else "",
        "ice_servers": json.dumps(list(settings.S2S_ICE_SERVERS)),
        "slots_url": SLOTS_PATH,
        "session_defaults": session_defaults(),
        "noise_reductions": [(kind, NOISE_REDUCTION_WORDS.get(kind, kind)) for kind in NOISE_REDUCTION_TYPES],
        "models": settings.S2S_POOL.describe(),
        # Translate mode: its own secrets (a secret that opens a translation only), endpoints and target languages
        "translation_path": TRANSLATION_PATH,
        "translation_secrets_url": translation_secrets_url,
        "translation_calls_url": TRANSLATION_CALLS_PATH if _routed(TRANSLATION_CALLS_PATH) else "",
        "target_languages": [
            (code, language_name(code)) for code in target_languages(settings.S2S_POOL.engines.kokoro_voices_dir)
        ],
    }
    return render(request, "realtime/index.html", context)


# The page's words for each ``audio.input.noise_reduction`` type the protocol takes.
NOISE_REDUCTION_WORDS = {
    "near_field": "Near field (a headset, or a phone held close)",
    "far_field": "Far field (a laptop's or a room's microphone)",
}


def session_defaults() -> dict[str, object]:
    """The session a new connection gets, as ``session.created`` will show it: the settings form starts from it,
    so pressing Apply before connecting sends these values rather than an empty form."""
    voices = tuple(settings.S2S_POOL.engines.all_voices) or ("alloy",)
    return session_render.as_ga(SessionConfig("sess_defaults", "gpt-realtime", voices))


def installed_voices(engines: EngineConfig) -> list[tuple[str, str]]:
    """(value, label) per voice model really loaded: the default voice once, then each extra voice.

    The OpenAI names in ``engines.voices`` are aliases of the one default voice; listing them
    all would offer ten choices that sound the same. The default is sent as its first alias.
    """
    model = engines.tts_model_name or (Path(engines.tts_model).stem if engines.tts_model else "")
    default = f"Default voice ({engines.tts_backend.capitalize()}{', ' + model if model else ''})"
    voices = [(engines.voices[0], default)] if engines.voices else []
    voices += [
        (name, name.replace("_", " ").replace("-", " "))
        for name, _ in engines.extra_voices
        if name not in engines.voices
    ]
    taken = {value for value, _ in voices} | set(engines.voices)
    voices += [(name, kokoro_label(name)) for name in engines.kokoro_names if name not in taken]
    return voices


def kokoro_label(name: str) -> str:
    """``af_heart`` as the page shows it: "Kokoro heart (US English, female)"."""
    accent = {"a": "US English", "b": "British English"}.get(name[:1], "")
    gender = {"f": "female", "m": "male"}.get(name[1:2], "")
    details = ", ".join(part for part in (accent, gender) if part)
    return f"Kokoro {name[3:] or name}" + (f" ({details})" if details else "")


TIMINGS_PATH = "/v1/realtime/sessions/SESSION_ID/timings"


def _api_error(status: int, code: str, message: str, param: str | None = None) -> JsonResponse:
    return JsonResponse(
        {"error": {"type": "invalid_request_error", "code": code, "message": message, "param": param}}, status=status
    )


def _auth_refused(exc: auth.AuthError) -> JsonResponse:
    return _api_error(AUTH_STATUS.get(exc.code, 503), exc.code, exc.message)


@require_GET
@owner.route(_auth_refused)
async def session_timings(request: HttpRequest, session_id: str, caller: Caller) -> JsonResponse:
    """``GET``: what the server measured for each response of a session, in milliseconds.

    The Realtime events carry no timings, so the page reads its own session's breakdown
    (STT, LM first token, TTS first audio, end of speech to first audio) here, the same
    figures the admin and ``/metrics`` show. Only numbers and ids, never text or audio.
    Allowed to whom the owner rule lets read it (the session's credential, its API key, a user with the
    admin's read permission); to anyone else the session does not exist (404, as an unknown id).
    """
    return await sync_to_async(_timings)(session_id, caller)


def _timings(session_id: str, caller: Caller) -> JsonResponse:
    row = RealtimeSession.objects.filter(id=session_id).only("id", "owner_credential", "owner_key").first()
    if row is None or (settings.S2S_AUTH_REQUIRED and not Owner.of_record(row).reads(caller)):
        return _api_error(404, "session_not_found", f"No session with id '{session_id[:100]}' that you may read.")
    rows = ResponseRecord.objects.filter(session_id=session_id).order_by("finished_at")
    responses = [
        {
            "response_id": row.response_id,
            "item_id": row.item_id,
            "status": row.status,
            **{f"{stage.value}_ms": _ms(getattr(row, stage.field)) for stage in Stage},
        }
        for row in rows
    ]
    return JsonResponse({"session_id": session_id, "responses": responses})


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _routed(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def healthz(request: HttpRequest) -> JsonResponse:
    """Alive: the process answers."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Ready: the pool is warm, admitting, and has a free unit (a load balancer routes on this).

    Anyone gets the status and its code; the details (units, the start error with its model
    paths, the channel layer) only a caller this server knows (see :func:`may_see_details`).
    """
    body, code = _readiness()
    if not may_see_details(request):
        body = {"status": body["status"]}
    return JsonResponse(body, status=code)


def slots(request: HttpRequest) -> JsonResponse:
    """``GET``: whether a session can be had now (``status`` as ``/readyz`` says it), always with 200.

    The page asks before it connects or retries: a full pool is a normal state to wait out, and
    a 429 or 503 answer would be logged by the browser as an error on every try.
    """
    body, code = _readiness()
    return JsonResponse({"status": body["status"], "available": code == 200})


def _readiness() -> tuple[dict[str, object], int]:
    rt = runtime.current()
    pool = rt.pool
    if pool is None:
        state = "failed" if rt.start_error else "starting"
        return {"status": state, "error": rt.start_error}, 503
    free = pool.free_units()
    body: dict[str, object] = {
        "status": "ready",
        "warm": pool.warm,
        "admitting": pool.admitting,
        "units": len(pool.units),
        "free_units": free,
    }
    if settings.REDIS_URL:  # degraded Redis: sessions go on, so this alone does not make the node unready
        body["channel_layer"] = channel_layer.status()
    if not pool.admitting or free == 0:
        body["status"] = "warming" if not pool.warm else ("draining" if not pool.admitting else "full")
        return body, 503
    if rt.listeners:
        body["listeners"] = "up" if all(listener.up for listener in rt.listeners) else "down"
        if body["listeners"] == "down":  # the phone line is dead until the listener starts again
            body["status"] = "listener_down"
            return body, 503
    return body, 200


def may_see_details(request: HttpRequest) -> bool:
    """Authentication off (a trusted local setup), a signed-in staff user, the metrics token, or an API key."""
    if not settings.S2S_AUTH_REQUIRED:
        return True
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return True
    token = auth.bearer_token(request.headers.get("Authorization", ""))
    if not token:
        return False
    if settings.S2S_METRICS_TOKEN and hmac.compare_digest(token.encode(), settings.S2S_METRICS_TOKEN.encode()):
        return True
    try:
        auth.verify_api_key(token)
    except auth.AuthError:
        return False
    return True


def metrics(request: HttpRequest) -> HttpResponse:
    """This process's metrics in the Prometheus text format (scrape every node).

    With ``S2S_METRICS_TOKEN`` set, only a request carrying ``Authorization: Bearer <token>`` gets them.
    """
    if settings.S2S_METRICS_TOKEN and not _bearer_matches(request, settings.S2S_METRICS_TOKEN):
        response = HttpResponse("A metrics token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response

    return HttpResponse(runtime.current().metrics.render(), content_type=metrics_exposition.CONTENT_TYPE)


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    given = auth.bearer_token(request.headers.get("Authorization", ""))
    return given is not None and hmac.compare_digest(given.encode(), token.encode())
