"""The one owner rule: who may reach a live session or call, and read what is kept of it.

A session remembers its :class:`Owner`: the hash of the key or ``ek_`` secret that opened it (or
accepted its call) and the API key behind that credential (the key itself, or the key that minted
the secret). Every way in asks :meth:`Owner.may_reach` for a :class:`Caller`: following a call
(``/v1/realtime?call_id=``), hanging up, ``accept``/``reject``/``refer``; :meth:`Owner.reads` for a
session's timings. Allowed are the same credential and the API key behind it, and a signed-in user with
the admin's permission (``realtime.end_live_session`` to control, ``realtime.view_realtimesession`` to
read; ``is_staff`` alone is not enough, and the cookie needs a CSRF token); to anyone else the session
does not exist (404, or ``error`` + close 1008, worded as for an unknown id). A client secret reaches
only the session it opened (and that session's call), never another session of its key. A session
opened with authentication off is open to anyone.

A phone call comes in over the trunk, not with a credential: it is owned by the API key
``S2S_SIP_OWNER_KEY`` names (else by staff alone). A ringing call announced to the webhook, with no
owner key set, may be answered (accepted, rejected or hung up) by any API key (not a client secret); the key that
accepts it owns it.

A supervisor (issue 51) may listen to, whisper to, take over and hand back ANY live session
(:meth:`Owner.supervises`): an API key made with ``create_api_key --supervisor``, or a signed-in user with
``realtime.supervise_live_session``; nobody else, not the session's own key nor staff without that permission.

Identifying a caller never spends a client secret. The question crosses processes as a small dict
(:meth:`Caller.as_message`), so the node that holds a call decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from http.cookies import SimpleCookie
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from channels import auth as channels_auth
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from realtime.access import auth
from realtime.access.auth import Principal
from realtime.models import ApiKey, ClientSecret

# The admin's permissions a signed-in user needs on the API: to end or control any live session, and to read any
# session's records (what the admin's own end route and session pages ask).
CONTROL_PERMISSION = "realtime.end_live_session"
READ_PERMISSION = "realtime.view_realtimesession"
SUPERVISE_PERMISSION = "realtime.supervise_live_session"  # listen, whisper, take over, hand back: any live session
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})  # RFC 9110's safe methods: no CSRF check, as Django's


@dataclass(frozen=True)
class Caller:
    """Who asks: the hash of their bearer token ("" none), their API key's id (the key, or the key that minted the
    secret), whether that token is a client secret, and what a signed-in user's permissions let them do."""

    credential: str = ""
    api_key_id: int | None = None
    secret: bool = False  # the credential is an ``ek_`` client secret: it reaches the session it opened, no other
    staff: bool = False  # signed in with CONTROL_PERMISSION: ends and controls any live session
    reader: bool = False  # signed in with READ_PERMISSION: reads any session's records
    supervisor: bool = False  # a supervisor key, or signed in with SUPERVISE_PERMISSION: supervises any live session
    name: str = ""  # who, as the records name them: the user's name, or "key:NAME"

    def as_message(self) -> dict[str, Any]:
        return {
            "credential": self.credential,
            "api_key_id": self.api_key_id,
            "secret": self.secret,
            "staff": self.staff,
            "reader": self.reader,
            "supervisor": self.supervisor,
            "name": self.name,
        }

    @classmethod
    def from_message(cls, message: Any) -> Caller:
        if not isinstance(message, dict):
            return cls()
        key = message.get("api_key_id")
        return cls(
            str(message.get("credential") or ""),
            key if isinstance(key, int) and not isinstance(key, bool) else None,
            message.get("secret") is not False,  # a message that does not say is taken as the narrower secret
            message.get("staff") is True,
            message.get("reader") is True,
            message.get("supervisor") is True,
            str(message.get("name") or "")[:200],
        )


# The call controls any API key may send a ringing call announced to the webhook (no owner key set): it answers
# (accept), declines (reject, hangup), or is told the call is not answered yet (refer: 409, as its owner would be).
ANSWERING = frozenset({"accept", "reject", "hangup", "refer"})


@dataclass(frozen=True)
class Owner:
    """Who a session belongs to. Neither a credential nor a key, and not ``open``: staff alone."""

    credential: str = ""  # the hash of the key or client secret that opened it
    api_key_id: int | None = None  # that key, or the key that minted the secret
    open: bool = False  # opened with authentication off: anyone
    answerable: bool = False  # a ringing call any API key may accept or reject (it then owns the call)

    @classmethod
    def of(cls, token: str | None, principal: Principal) -> Owner:
        """The owner of a session ``principal`` opened, presenting ``token``."""
        if principal.kind == "anonymous":
            return cls(open=True)
        return cls(auth.hash_token(token) if token else "", principal.api_key_id)

    def may_reach(self, caller: Caller) -> bool:
        """The owner rule: the same credential, its API key (not another secret of that key), a signed-in user
        who may control live sessions; anyone when open."""
        return self.open or caller.staff or self._owned_by(caller)

    def reads(self, caller: Caller) -> bool:
        """Whether ``caller`` may read what is kept of the session (its timings): the owner rule, with a
        signed-in user's read permission in place of the control permission."""
        return self.open or caller.reader or self._owned_by(caller)

    def supervises(self, caller: Caller) -> bool:
        """Whether ``caller`` may supervise the session (listen, whisper, take over, hand back): a supervisor key
        or a user with SUPERVISE_PERMISSION, whoever owns it; anyone when open. Not the owner without the flag."""
        return self.open or caller.supervisor

    def may_control(self, caller: Caller, action: str) -> bool:
        """:meth:`may_reach`, and for the controls of a ringing call (:data:`ANSWERING`) any API key (a key, not a
        client secret) while the call is answerable (announced to the webhook, no owner key set)."""
        answering = action in ANSWERING and self.answerable and caller.api_key_id is not None and not caller.secret
        return answering or self.may_reach(caller)

    def _owned_by(self, caller: Caller) -> bool:
        if caller.credential and caller.credential == self.credential:
            return True
        return not caller.secret and caller.api_key_id is not None and caller.api_key_id == self.api_key_id

    def record_fields(self) -> dict[str, Any]:
        """What a session's record keeps of its owner (``RealtimeSession.owner_*``)."""
        return {"owner_credential": self.credential, "owner_key_id": self.api_key_id}

    @classmethod
    def of_record(cls, row: Any) -> Owner:
        """The owner a session's record keeps (``RealtimeSession``): no ``open``, no answering."""
        return cls(row.owner_credential, row.owner_key_id)


def sip_owner(owner_key_name: str, answerable: bool) -> Owner:
    """The owner of a call that came in over SIP (sync: reads the database): the newest active API key named
    ``owner_key_name``, else staff alone; anyone with authentication off. ``answerable``: announced to the
    webhook, so that any API key may answer it when no owner key is named."""
    if not settings.S2S_AUTH_REQUIRED:
        return Owner(open=True)
    key_id = None
    if owner_key_name:
        key_id = (
            ApiKey.objects.filter(name=owner_key_name, revoked_at__isnull=True)
            .order_by("-created_at")
            .values_list("pk", flat=True)
            .first()
        )
    return Owner(api_key_id=key_id, answerable=answerable and not owner_key_name)


# --- identifying a caller -----------------------------------------------------------------


def _caller_for_token(token: str) -> Caller:
    """A bearer token as a caller (sync: reads the database); raises :class:`auth.AuthError` for an unknown one.

    Never spends a client secret. A secret is known whether or not it was spent or expired (its session
    may outlive its expiry), unless the key that minted it was revoked."""
    digest = auth.hash_token(token)
    if token.startswith(auth.SECRET_PREFIX):
        secret = ClientSecret.objects.filter(secret_hash=digest).values("api_key_id", "api_key__revoked_at").first()
        if secret is None or secret["api_key__revoked_at"] is not None:
            raise auth.AuthError("invalid_api_key", "The client secret is unknown.")
        return Caller(digest, secret["api_key_id"], secret=True)
    principal = auth.verify_api_key(token)
    return Caller(digest, principal.api_key_id, supervisor=principal.supervisor, name=f"key:{principal.name}"[:200])


async def identify_token(token: str | None) -> Caller:
    """The caller a bearer token (or none) names; raises :class:`auth.AuthError` (authentication on, and no
    token or an unknown one). With authentication off every session is open, so any token will do."""
    if not settings.S2S_AUTH_REQUIRED:
        return Caller()
    if token:
        return await sync_to_async(_caller_for_token)(token)
    raise auth.AuthError(
        "invalid_api_key",
        "Send the credential that opened the session (or its API key) as 'Authorization: Bearer KEY'.",
        reason="Missing credentials",
    )


async def identify_scope(scope: dict[str, Any]) -> Caller:
    """The caller of a WebSocket handshake: the Origin checked, then its key or secret (header or subprotocol)."""
    auth.check_origin(scope)
    return await identify_token(auth.scope_token(scope))


async def identify_supervisor(scope: dict[str, Any]) -> Caller:
    """The caller of a supervise WebSocket (``?mode=supervise``): its key or secret as :func:`identify_scope`, or,
    with neither, a signed-in staff user's session cookie, taken only with an Origin (a browser's, checked to be
    this site's or a trusted one: no other page can use the cookie). Raises :class:`auth.AuthError`."""
    auth.check_origin(scope)
    token = auth.scope_token(scope)
    headers = {name.lower(): value for name, value in scope.get("headers", [])}
    if token or b"origin" not in headers:
        return await identify_token(token)
    user = await _cookie_user(headers.get(b"cookie", b"").decode("latin1"))
    if user is not None:
        control, read = await user.ahas_perm(CONTROL_PERMISSION), await user.ahas_perm(READ_PERMISSION)
        supervise = await user.ahas_perm(SUPERVISE_PERMISSION)
        return Caller(staff=control, reader=read, supervisor=supervise, name=user.get_username()[:200])
    return await identify_token(None)


async def _cookie_user(cookie: str) -> Any | None:
    """The active staff user a ``Cookie`` header's Django session signs in, if any (channels' own ``get_user``)."""
    jar = SimpleCookie()
    jar.load(cookie)
    morsel = jar.get(settings.SESSION_COOKIE_NAME)
    if morsel is None or not morsel.value:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(morsel.value)
    user = await channels_auth.get_user({"session": store})
    return user if user.is_active and user.is_staff else None


async def still_identified(scope: dict[str, Any], caller: Caller) -> bool:
    """Whether a WebSocket's credential still names ``caller``: asked again once a follower has joined its key's
    group, so that a key revoked between the first look and the join cannot leave the follower on the call."""
    if caller.api_key_id is None:
        return True
    try:
        return await identify_scope(scope) == caller
    except auth.AuthError:
        return False


async def identify(request: HttpRequest) -> Caller:
    """The caller of an HTTP request: the Origin checked first (a foreign page reaches no session, with or
    without authentication), then a bearer token or a staff sign-in; raises :class:`auth.AuthError`.

    A staff sign-in is a cookie, which a browser sends along on any page's request: a request that changes
    something needs Django's CSRF token with it (else 403 ``csrf_failed``), and the user's permissions say what
    they may do (:data:`CONTROL_PERMISSION`, :data:`READ_PERMISSION`); a staff user with neither is a stranger."""
    scope = getattr(request, "scope", None) or {  # ASGI, or a WSGI request (the test client) as its headers
        "headers": [(name.lower().encode("latin1"), value.encode("latin1")) for name, value in request.headers.items()],
        "scheme": request.scheme,
    }
    auth.check_origin(scope)
    authorization = request.headers.get("Authorization", "")
    token = auth.bearer_token(authorization) if authorization else None
    if not token:
        user = await request.auser()
        if user.is_active and user.is_staff:
            if request.method not in SAFE_METHODS and await sync_to_async(_csrf_rejected)(request):
                raise auth.AuthError(
                    "csrf_failed", "CSRF check failed: send the X-CSRFToken header.", reason="CSRF check failed"
                )
            control, read = await user.ahas_perm(CONTROL_PERMISSION), await user.ahas_perm(READ_PERMISSION)
            return Caller(staff=control, reader=read)
    return await identify_token(token)


def _csrf_rejected(request: HttpRequest) -> bool:
    """Whether Django's CSRF check refuses ``request`` (the check alone: no view to run, none to exempt)."""
    return CsrfViewMiddleware(lambda _request: HttpResponse()).process_view(request, None, (), {}) is not None  # type: ignore[arg-type]


# --- the routes that reach a session ------------------------------------------------------

View = Callable[..., Coroutine[Any, Any, HttpResponse]]


def route(refused: Callable[[auth.AuthError], HttpResponse]) -> Callable[[View], View]:
    """Marks an HTTP view as one that reaches a session, and identifies its caller first: the view is called
    with ``caller=``; a caller who cannot be identified gets ``refused(error)``. Every URL with a session's
    or a call's id goes through this (``tests/security/test_owner_routes.py`` walks the URLs)."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        async def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                caller = await identify(request)
            except auth.AuthError as exc:
                return refused(exc)
            return await view(request, *args, caller=caller, **kwargs)

        # A mark on the function, read by tests/security/test_owner_routes.py: functions have no declared attributes.
        checked.owner_rule = True  # type: ignore[attr-defined]
        return checked

    return decorate
