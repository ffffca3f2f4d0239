"""Who may open a session: API keys, one-use client secrets, and the Origin of browsers.

Keys arrive as OpenAI clients send them: ``Authorization: Bearer KEY`` (the
official SDKs, server to server) or, from a browser, which cannot set headers on
a WebSocket, as the subprotocol ``openai-insecure-api-key.KEY``. Browsers should
rather use a short-lived ``ek_`` client secret minted by their backend with
``POST /v1/realtime/client_secrets``: it opens exactly one session before it
expires.

Everything here runs before the consumer claims a unit, so a connection
without valid credentials never holds one.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.http.request import split_domain_port, validate_host
from django.utils import timezone

from realtime.models import ApiKey, ClientSecret
from realtime.protocol.close_codes import CLOSE_POLICY, CLOSE_TRY_AGAIN

logger = logging.getLogger(__name__)

KEY_PREFIX = "sk-s2s-"
SECRET_PREFIX = "ek_"
SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
# The kinds of session a client secret opens: a voice agent's (``/v1/realtime``, the GA ``realtime`` and
# ``transcription`` types) or a translation's (``/v1/realtime/translations``), never the other.
REALTIME, TRANSLATION = "realtime", "translation"
INVALID_SECRET = (
    "The client secret is invalid, expired or already used (a secret opens only the kind of session it was "
    "made for: /v1/realtime or /v1/realtime/translations)."
)


class AuthError(Exception):
    """Credentials or origin refused; becomes an ``error`` event and a close."""

    def __init__(
        self,
        code: str,
        message: str,
        close_code: int = CLOSE_POLICY,
        reason: str = "Invalid credentials",
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.close_code, self.reason, self.error_type = (
            code,
            message,
            close_code,
            reason,
            error_type,
        )


@dataclass(frozen=True)
class Principal:
    """Who opened a session: an API key, a client secret (minted by a key), or nobody (auth off)."""

    kind: str  # "api_key" | "client_secret" | "anonymous"
    name: str
    api_key_id: int | None = None
    secret_id: int | None = None
    session_config: dict[str, Any] = field(default_factory=dict)
    supervisor: bool = False  # an API key made with ``create_api_key --supervisor`` (realtime.access.owner)


ANONYMOUS = Principal("anonymous", "")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# --- minting ---------------------------------------------------------------


def create_api_key(name: str, supervisor: bool = False) -> tuple[Any, str]:
    """Creates a key (``supervisor``: one that may supervise any live session); returns (the stored ApiKey, the
    clear key: shown once, never stored)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return ApiKey.objects.create(name=name, prefix=key[:12], key_hash=hash_token(key), supervisor=supervisor), key


def create_client_secret(api_key: Any | None, session_config: dict[str, Any], ttl_s: int) -> tuple[Any, str]:
    """Mints an ``ek_`` secret good for one session within ``ttl_s`` seconds."""
    value = SECRET_PREFIX + secrets.token_urlsafe(32)
    secret = ClientSecret.objects.create(
        secret_hash=hash_token(value),
        api_key=api_key,
        expires_at=timezone.now() + timedelta(seconds=ttl_s),
        session_config=session_config,
    )
    return secret, value


# --- reading credentials ---------------------------------------------------


def bearer_token(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def scope_token(scope: Mapping[str, Any]) -> str | None:
    """The key or secret a WebSocket handshake carries (header first, then subprotocol)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            return bearer_token(value.decode("latin1"))
    for protocol in scope.get("subprotocols") or []:
        if protocol.startswith(SUBPROTOCOL_PREFIX):
            return protocol[len(SUBPROTOCOL_PREFIX) :] or None
    return None


DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]  # (scheme, host, port)


def parse_origin(value: str, default_scheme: str | None = None) -> Origin | None:
    """``scheme://host[:port]`` as (scheme, lower-case host, port with the scheme's default filled in); None for
    anything else, an origin that does not parse (``http://[::1``) included: a refusal, never a 500."""
    try:
        parts = urlsplit(value if default_scheme is None else f"{default_scheme}://{value}")
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc or parts.path not in ("", "/"):
        return None  # "null" (sandboxed frames, file://) and the like
    host, port = split_domain_port(parts.netloc)
    if not host or (port and not port.isdigit()):
        return None
    return parts.scheme, host, int(port) if port else DEFAULT_PORTS[parts.scheme]


def own_origin(scope: Mapping[str, Any], headers: dict[bytes, bytes]) -> Origin | None:
    """The origin the client reached: the ``Host`` it asked for (one ``ALLOWED_HOSTS`` accepts) and the
    scheme it came in with (``wss``, or ``https`` at a TLS proxy that says so in ``SECURE_PROXY_SSL_HEADER``)."""
    host = headers.get(b"host", b"").decode("latin1")
    domain, _ = split_domain_port(host)
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, value = proxy
        forwarded = headers.get(name.removeprefix("HTTP_").lower().replace("_", "-").encode(), b"")
        secure = forwarded.decode("latin1").split(",")[0].strip() == value
    return parse_origin(host, "https" if secure else "http")


def trusted(origin: Origin, pattern: str) -> bool:
    """``CSRF_TRUSTED_ORIGINS`` semantics: an exact origin, or ``scheme://*.domain`` for its subdomains."""
    wildcard = "://*." in pattern
    expected = parse_origin(pattern.replace("://*.", "://", 1))
    if expected is None or origin[0] != expected[0] or origin[2] != expected[2]:
        return False
    return origin[1] == expected[1] or (wildcard and origin[1].endswith("." + expected[1]))


def origin_allowed(origin: str, scope: Mapping[str, Any], headers: dict[bytes, bytes]) -> bool:
    """Same origin (scheme, host and port equal to what the client reached), or one listed in
    ``CSRF_TRUSTED_ORIGINS``. ``ALLOWED_HOSTS`` only says which ``Host`` this server answers to:
    ``*`` there lets no foreign origin in."""
    parsed = parse_origin(origin)
    if parsed is None:
        return False
    if any(trusted(parsed, pattern) for pattern in settings.CSRF_TRUSTED_ORIGINS):
        return True
    return parsed == own_origin(scope, headers)


def check_origin(scope: Mapping[str, Any]) -> None:
    """Browsers always send Origin; other clients (SDKs, servers) send none and pass."""
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    if b"origin" in headers:
        origin = headers[b"origin"].decode("latin1")
        if not origin_allowed(origin, scope, headers):
            raise AuthError(
                "invalid_origin", f"Origin '{origin[:200]}' is not allowed to connect.", reason="Origin not allowed"
            )


# --- verifying -------------------------------------------------------------


class _KnownKeys:
    """Keys verified recently, used only while the database does not answer.

    With the database up, every connection is checked against it (a revoked
    key stops working at once); with it down, keys seen in the last
    ``S2S_AUTH_CACHE_S`` seconds still open sessions.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def remember(self, digest: str, principal: Principal) -> None:
        with self._lock:
            self._seen[digest] = (time.monotonic(), principal)
            if len(self._seen) > 10_000:
                self._seen.pop(next(iter(self._seen)))

    def recall(self, digest: str) -> Principal | None:
        with self._lock:
            seen = self._seen.get(digest)
        if seen is None or time.monotonic() - seen[0] > settings.S2S_AUTH_CACHE_S:
            return None
        return seen[1]

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()


known_keys = _KnownKeys()

INVALID_KEY = "Incorrect API key provided. Create one with 'python manage.py create_api_key NAME'."


def verify_api_key(token: str) -> Principal:
    """Checks an ``sk-`` key against the database (sync: call it off the event loop)."""
    digest = hash_token(token)
    try:
        key = ApiKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    except DatabaseError:
        cached = known_keys.recall(digest)
        if cached is None:
            logger.exception("cannot verify an API key: the database does not answer")
            raise AuthError(
                "auth_unavailable",
                "Credentials cannot be checked right now. Try again shortly.",
                CLOSE_TRY_AGAIN,
                "Try again later",
                "server_error",
            ) from None
        return cached
    if key is None:
        raise AuthError("invalid_api_key", INVALID_KEY)
    principal = Principal("api_key", key.name, api_key_id=key.pk, supervisor=key.supervisor)
    known_keys.remember(digest, principal)
    return principal


def mark_used(principal: Principal, at: datetime) -> None:
    """Stamps the API key's ``last_used_at`` (the caller decides when: sessions write it off the handshake)."""
    if principal.kind == "api_key" and principal.api_key_id is not None:
        ApiKey.objects.filter(pk=principal.api_key_id).update(last_used_at=at)


def secret_kind(session_config: Mapping[str, Any] | None) -> str:
    """The kind of session a secret minted with ``session_config`` opens."""
    return TRANSLATION if (session_config or {}).get("type") == TRANSLATION else REALTIME


def use_client_secret(token: str, session_id: str, kind: str = REALTIME) -> Principal:
    """Spends an ``ek_`` secret on ``session_id``: one atomic UPDATE, so two connections cannot both use it. A
    secret made for the other ``kind`` of session is refused as an unknown one is, and is not spent."""
    digest = hash_token(token)
    now = timezone.now()
    try:
        config = ClientSecret.objects.filter(secret_hash=digest).values_list("session_config", flat=True).first()
        if secret_kind(config) != kind:
            raise AuthError("invalid_api_key", INVALID_SECRET, reason="Invalid client secret")
        live = Q(secret_hash=digest, used_at__isnull=True, expires_at__gt=now) & (
            Q(api_key__isnull=True) | Q(api_key__revoked_at__isnull=True)
        )
        spent = ClientSecret.objects.filter(live).update(used_at=now, session_id=session_id)
        if spent != 1:
            raise AuthError("invalid_api_key", INVALID_SECRET, reason="Invalid client secret")
        secret = ClientSecret.objects.select_related("api_key").get(secret_hash=digest)
    except DatabaseError:
        logger.exception("cannot check a client secret: the database does not answer")
        raise AuthError(
            "auth_unavailable",
            "Credentials cannot be checked right now. Try again shortly.",
            CLOSE_TRY_AGAIN,
            "Try again later",
            "server_error",
        ) from None
    name = f"{secret.api_key.name} (client secret)" if secret.api_key else "client secret"
    return Principal(
        "client_secret",
        name,
        api_key_id=secret.api_key_id,
        secret_id=secret.pk,
        session_config=secret.session_config or {},
    )


def give_back_secret(principal: Principal) -> None:
    """Makes a spent secret usable again when its session never started (no free unit)."""
    if principal.secret_id is not None:
        ClientSecret.objects.filter(pk=principal.secret_id).update(used_at=None, session_id="")


def authenticate_token(token: str | None, session_id: str, kind: str = REALTIME) -> Principal:
    if not token:
        raise AuthError(
            "invalid_api_key",
            "Missing credentials: send 'Authorization: Bearer KEY' (or, on a "
            f"WebSocket, the subprotocol '{SUBPROTOCOL_PREFIX}KEY').",
            reason="Missing credentials",
        )
    if token.startswith(SECRET_PREFIX):
        return use_client_secret(token, session_id, kind)
    return verify_api_key(token)


async def authenticate(scope: Mapping[str, Any], session_id: str, kind: str = REALTIME) -> Principal:
    """Checks the Origin and the credentials of a WebSocket handshake (a client secret: one made for ``kind``);
    raises :class:`AuthError`."""
    check_origin(scope)
    if not settings.S2S_AUTH_REQUIRED:
        return ANONYMOUS
    return await database_sync_to_async(authenticate_token)(scope_token(scope), session_id, kind)


async def authenticate_request(
    scope: Mapping[str, Any], authorization: str, session_id: str, kind: str = REALTIME
) -> Principal:
    """The same checks for an HTTP request (a WebRTC offer; ``scope`` its ASGI scope): the Origin, then
    ``Authorization: Bearer`` with an API key or an ``ek_`` client secret; raises :class:`AuthError`."""
    check_origin(scope)
    if not settings.S2S_AUTH_REQUIRED:
        return ANONYMOUS
    token = bearer_token(authorization) if authorization else None
    return await database_sync_to_async(authenticate_token)(token, session_id, kind)


def expires_at_epoch(moment: datetime) -> int:
    return int(moment.timestamp())
