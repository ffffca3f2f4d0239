"""``POST /v1/realtime/client_secrets`` and ``POST /v1/realtime/translations/client_secrets``: mint a
short-lived ``ek_`` secret, in OpenAI's GA shape, that opens one session of its kind (a voice agent's, or a
translation's) and no other.

Who may ask: a client with an API key (``Authorization: Bearer KEY``, a
backend minting secrets for its browsers), a signed-in staff user of this
server (the built-in browser page; CSRF-checked, as cookies are ambient), or
anyone when ``S2S_AUTH_REQUIRED`` is off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from pipelines.ids import new_id
from pipelines.translation import target_languages
from realtime.access import auth
from realtime.models import ApiKey, Prompt
from realtime.protocol import translation
from realtime.protocol.session import render
from realtime.protocol.session.config import SessionConfig
from realtime.protocol.wire import EventError, loads

MIN_TTL_S, MAX_TTL_S = 10, 7200


def api_error(
    status: int, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error"
) -> JsonResponse:
    return JsonResponse(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}, status=status
    )


def _caller(request: HttpRequest) -> tuple[Any | None, JsonResponse | None]:
    """(the ApiKey that asks, or None) or an error response."""

    header = request.headers.get("Authorization", "")
    if header:
        token = auth.bearer_token(header)
        if token is None or token.startswith(auth.SECRET_PREFIX):
            return None, api_error(401, "invalid_api_key", "Send an API key as 'Authorization: Bearer KEY'.")
        try:
            principal = auth.verify_api_key(token)
        except auth.AuthError as exc:
            return None, api_error(
                401 if exc.code == "invalid_api_key" else 503, exc.code, exc.message, error_type=exc.error_type
            )
        auth.mark_used(principal, timezone.now())
        key = principal.api_key_id
        return (ApiKey.objects.filter(pk=key).first() if key is not None else None), None
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        # Only the CSRF check runs: there is no response to wrap and no view to look at (None, as Django's own
        # csrf_protect never passes).
        rejected = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})  # type: ignore[arg-type]
        if rejected is not None:
            return None, api_error(403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header.")
        return None, None
    if not settings.S2S_AUTH_REQUIRED:
        return None, None
    return None, api_error(401, "invalid_api_key", "Missing credentials: send 'Authorization: Bearer KEY'.")


def _ttl(body: dict[str, Any]) -> int:
    expires = body.get("expires_after")
    if expires is None:
        return settings.S2S_CLIENT_SECRET_TTL_S
    if not isinstance(expires, dict):
        raise EventError("invalid_type", "Invalid type for 'expires_after': expected an object.", "expires_after")
    if expires.get("anchor", "created_at") != "created_at":
        raise EventError(
            "invalid_value", "Invalid value for 'expires_after.anchor': expected 'created_at'.", "expires_after.anchor"
        )
    seconds = expires.get("seconds", settings.S2S_CLIENT_SECRET_TTL_S)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise EventError(
            "invalid_value",
            f"'expires_after.seconds' must be an integer from {MIN_TTL_S} to {MAX_TTL_S}.",
            "expires_after.seconds",
        )
    return seconds


Minted = tuple[dict[str, Any], dict[str, Any]]  # (the settings the secret keeps, the session as the answer shows it)


def _fits(config: dict[str, Any]) -> None:
    limit = settings.S2S_MAX_CLIENT_SECRET_CONFIG_BYTES
    size = len(json.dumps(config))
    if size > limit:
        raise EventError(
            "session_too_large",
            f"The session settings are {size} bytes of JSON; a client secret may carry at most {limit}.",
            "session",
        )


def _model(requested: dict[str, Any], default: str) -> str:
    model = requested.get("model") or default
    if not isinstance(model, str):
        raise EventError("invalid_type", "Invalid type for 'session.model': expected a string.", "session.model")
    return model


def _voice_session(requested: dict[str, Any]) -> Minted:
    """A voice agent's (or a transcription's) settings, checked now: a bad setting fails here, not at connect."""
    if requested.get("type", "realtime") not in ("realtime", "transcription"):
        raise EventError(
            "invalid_value",
            "Invalid value for 'session.type': expected 'realtime' or 'transcription'.",
            "session.type",
        )
    session = SessionConfig(
        new_id("sess"),
        _model(requested, settings.S2S_DEFAULT_MODEL),
        settings.S2S_POOL.engines.all_voices,
        settings.S2S_MAX_INSTRUCTIONS_BYTES,
        settings.S2S_MAX_SESSION_SECONDS,
    )
    config = {key: value for key, value in requested.items() if key not in ("model", "client_secret")}
    _fits(config)
    session.update(config, beta=False, prompts=Prompt.objects.lookup)
    return config, render.as_ga(session)


def _translation_session(requested: dict[str, Any]) -> Minted:
    """A translation session's settings (``audio.output.language``, ``audio.input.transcription`` and
    ``noise_reduction``), checked now; the secret keeps its type, so it opens only a translation session."""
    if requested.get("type", auth.TRANSLATION) != auth.TRANSLATION:
        raise EventError("invalid_value", "Invalid value for 'session.type': expected 'translation'.", "session.type")
    model = _model(requested, translation.DEFAULT_MODEL)
    rest = {key: value for key, value in requested.items() if key not in ("type", "model")}
    config = {"type": auth.TRANSLATION, "model": model, **rest}
    _fits(config)
    session = translation.new_settings(new_id("sess"), model, target_languages(), settings.S2S_MAX_SESSION_SECONDS)
    session.update(rest)
    return config, session.as_wire()


def _mint(request: HttpRequest, session_of: Callable[[dict[str, Any]], Minted]) -> JsonResponse:
    """The one way a secret is minted, whatever session it opens: who asks, the body, its lifetime, the
    settings (``session_of``), the answer in OpenAI's shape."""
    if request.method != "POST":
        return api_error(405, "method_not_allowed", "Use POST.")
    api_key, rejected = _caller(request)
    if rejected is not None:
        return rejected
    limit = settings.S2S_MAX_CLIENT_SECRET_CONFIG_BYTES
    if int(request.headers.get("Content-Length") or 0) > 2 * limit:
        return api_error(413, "request_too_large", f"The body is larger than {2 * limit} bytes.")
    try:
        body = loads(request.body or b"{}")
    except EventError as exc:
        return api_error(400, exc.code, exc.message.replace("The event", "The body"))
    if not isinstance(body, dict):
        return api_error(400, "invalid_type", "The body must be a JSON object.")
    try:
        ttl = _ttl(body)
        requested = body.get("session") or {}
        if not isinstance(requested, dict):
            raise EventError("invalid_type", "Invalid type for 'session': expected an object.", "session")
        config, shown = session_of(requested)
    except EventError as exc:
        return api_error(400, exc.code, exc.message, exc.param)
    secret, value = auth.create_client_secret(api_key, config, ttl)
    return JsonResponse({"value": value, "expires_at": auth.expires_at_epoch(secret.expires_at), "session": shown})


@csrf_exempt  # bearer-key callers carry no ambient credentials; the cookie path is CSRF-checked in _caller
def client_secrets(request: HttpRequest) -> JsonResponse:
    """``POST /v1/realtime/client_secrets``: a secret for one voice-agent (or transcription) session."""
    return _mint(request, _voice_session)


@csrf_exempt  # as client_secrets
def translation_client_secrets(request: HttpRequest) -> JsonResponse:
    """``POST /v1/realtime/translations/client_secrets``: a secret for one translation session."""
    return _mint(request, _translation_session)
