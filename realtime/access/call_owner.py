"""Who may hang up a WebRTC call: the credentials that opened it, the same API key's, or staff.

A call remembers the hash of the key or ``ek_`` secret that opened it and the API key behind
it (the key itself, or the key that minted the secret). A hang-up is allowed to the same
credential (a browser's spent secret), to that API key or any client secret it minted (the
backend that minted the browser's secret), and to a signed-in staff user; to anyone else the
call does not exist (404). A call opened with authentication off has no owner: any caller
whose Origin passes may end it. The question crosses processes as a small dict
(:meth:`Caller.as_message`), so the node that holds the call decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest

from realtime.access import auth
from realtime.access.auth import Principal
from realtime.models import ClientSecret


@dataclass(frozen=True)
class Caller:
    """Who asks for a hang-up: the hash of their bearer token ("" none), their API key's id, staff or not."""

    credential: str = ""
    api_key_id: int | None = None
    staff: bool = False

    def as_message(self) -> dict[str, Any]:
        return {"credential": self.credential, "api_key_id": self.api_key_id, "staff": self.staff}

    @classmethod
    def from_message(cls, message: Any) -> Caller:
        if not isinstance(message, dict):
            return cls()
        key = message.get("api_key_id")
        staff = message.get("staff") is True
        return cls(str(message.get("credential") or ""), key if isinstance(key, int) else None, staff)


@dataclass(frozen=True)
class CallOwner:
    """The credentials a call was opened with."""

    credential: str = ""  # the hash of the key or client secret ("" with authentication off)
    api_key_id: int | None = None  # the key, or the key that minted the secret

    @classmethod
    def of(cls, token: str | None, principal: Principal) -> CallOwner:
        if principal.kind == "anonymous":  # authentication off: the call has no owner
            return cls()
        return cls(auth.hash_token(token) if token else "", principal.api_key_id)

    def allows(self, caller: Caller) -> bool:
        if not self.credential and self.api_key_id is None:  # opened without credentials
            return True
        if caller.staff or (caller.credential and caller.credential == self.credential):
            return True
        return caller.api_key_id is not None and caller.api_key_id == self.api_key_id


def _caller_for_token(token: str) -> Caller:
    """A bearer token as a caller (sync: reads the database); raises :class:`auth.AuthError` for an unknown one.

    A client secret is known whether or not it was spent (its call may outlive its expiry)."""
    digest = auth.hash_token(token)
    if token.startswith(auth.SECRET_PREFIX):
        secret = ClientSecret.objects.filter(secret_hash=digest).values("api_key_id").first()
        if secret is None:
            raise auth.AuthError("invalid_api_key", "The client secret is unknown.")
        return Caller(digest, secret["api_key_id"])
    return Caller(digest, auth.verify_api_key(token).api_key_id)


async def identify(request: HttpRequest) -> Caller:
    """The caller of a hang-up: the Origin checked first (a foreign page cannot end calls, with or without
    authentication), then a bearer token or a staff session; raises :class:`auth.AuthError`."""
    auth.check_origin(request.scope)
    authorization = request.headers.get("Authorization", "")
    token = auth.bearer_token(authorization) if authorization else None
    if token:
        return await database_sync_to_async(_caller_for_token)(token)
    user = await request.auser()
    if user.is_active and user.is_staff:
        return Caller(staff=True)
    if settings.S2S_AUTH_REQUIRED:
        raise auth.AuthError(
            "invalid_api_key",
            "Send the credential that opened the call (or its API key) as 'Authorization: Bearer KEY'.",
        )
    return Caller()
