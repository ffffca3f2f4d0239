"""Who opens a session and how: the request a transport makes (``OpenRequest``), what the session and its
record start with (``Opening``), the credentials checked, the mailbox's groups, a refusal counted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from pipelines.ids import new_id
from pipelines.pool import PipelinePool
from realtime.access import auth
from realtime.access.owner import Owner
from realtime.audit import records
from realtime.live.transport import Refusal
from realtime.models import TransportKind
from realtime.node import cluster
from realtime.node.runtime import Runtime
from realtime.protocol.close_codes import CLOSE_POLICY

logger = logging.getLogger(__name__)

SESSION_LIMIT_REASON = "All session slots are in use"
T = TypeVar("T")


def session_limit() -> Refusal:
    """The refusal of a full pool (no unit free, none draining): 1008 on a socket, 429 over HTTP, 486 on SIP."""
    return Refusal("session_limit_reached", SESSION_LIMIT_REASON, CLOSE_POLICY, SESSION_LIMIT_REASON, http_status=429)


async def claim_soon(pool: PipelinePool, claim: Callable[[], T]) -> T:
    """``claim()`` (one atomic try that raises :class:`Refusal`), tried again while a unit drains, for up to
    ``S2S_CLAIM_WAIT_S``: a client that reconnects at once (a browser's Disconnect and Connect, a retry after a
    blip) finds the unit its last session is giving back, rather than a refusal. A pool with no unit draining
    refuses at once, and the refusal is counted once."""
    deadline = time.monotonic() + settings.S2S_POOL.claim_wait_s
    while True:
        try:
            return claim()
        except Refusal as refusal:
            if refusal.code != "session_limit_reached":
                raise
            freeing, remaining = pool.freeing(), deadline - time.monotonic()
            if freeing is None or remaining <= 0:
                pool.refused()
                raise
        with contextlib.suppress(TimeoutError):  # then one more try: the unit may have come back just now
            await asyncio.wait_for(asyncio.wrap_future(freeing), remaining)


AUTH_STATUS = {"invalid_api_key": 401, "invalid_origin": 403, "csrf_failed": 403}


@dataclass(frozen=True)
class OpenRequest:
    """What a transport knows when it opens a session.

    Credentials: ``principal`` when the transport authenticated otherwise (a SIP trunk it
    trusts, a test); else the ASGI ``scope`` (its ``Authorization`` header, or a WebSocket's
    ``openai-insecure-api-key.`` subprotocol, and its ``Origin``); with neither, only a
    server without authentication opens it.
    """

    transport: TransportKind
    scope: Mapping[str, Any] | None = None
    principal: auth.Principal | None = None
    model: str | None = None  # None: the model a client secret or the call's settings name, else the default
    beta: bool = False
    transcription: bool = False  # opened as a transcription session (``?intent=transcription``)
    client_addr: str = ""
    user_agent: str = ""
    call_id: str | None = None  # a call's id: it joins the call's group and ``Runtime.calls`` (hang-up by id)
    call_config: dict[str, Any] | None = None  # settings the call came with (applied after a client secret's)
    # The transport's own checks once the credentials passed (given the principal) and before any claim (a
    # WebRTC call meters the key and reads and applies its offer here); returns the call's settings (replacing
    # ``call_config``); raises Refusal.
    prepare: Callable[[auth.Principal], Awaitable[dict[str, Any] | None]] | None = None
    session_id: str = field(default_factory=lambda: new_id("sess"))
    owner: Owner | None = None  # None: whoever the credentials are (realtime.access.owner); a SIP call's is set
    kind: str = auth.REALTIME  # the kind of session opened: a client secret made for the other is refused


@dataclass(frozen=True)
class Opening:
    """Who opens a session and how: what the record keeps and what the session starts with."""

    session_id: str
    model: str
    beta: bool = False
    transcription: bool = False  # opened as a transcription session (``?intent=transcription``)
    principal: str = ""
    client_addr: str = ""
    user_agent: str = ""
    session_config: dict[str, Any] | None = None  # a client secret's settings
    call_config: dict[str, Any] | None = None  # the settings a call came with (applied after the secret's)
    transport: str = TransportKind.WEBSOCKET


def count_refusal(runtime: Runtime, opening: Opening, refusal: Refusal) -> None:
    """Counts a connection that never became a session (per minute and reason: no row each, no user agent kept)."""
    if runtime.session_refused(refusal.code, refusal.close_code):
        logger.info(
            "refused %s from %s: %s (further ones this minute are only counted)",
            opening.session_id,
            opening.client_addr or "?",
            refusal.code,
        )


async def authenticate(request: OpenRequest) -> auth.Principal:
    """The request's principal; raises :class:`Refusal` for missing or wrong credentials or a foreign Origin."""
    if request.principal is not None:  # the transport authenticated otherwise
        return request.principal
    try:
        return await auth.authenticate(request.scope or {}, request.session_id, request.kind)
    except auth.AuthError as exc:
        raise Refusal(
            exc.code, exc.message, exc.close_code, exc.reason, exc.error_type, AUTH_STATUS.get(exc.code, 503)
        ) from None


def principal_name(principal: auth.Principal, scope: Mapping[str, Any] | None) -> str:
    if principal.name:
        return f"{principal.kind}:{principal.name}"[:200]
    return records.principal_of(scope) if scope is not None else ""


def model_of(*configs: dict[str, Any] | None) -> str:
    """The model the last of ``configs`` to name one names (a call's settings after a client secret's)."""
    for config in reversed(configs):
        if config and isinstance(config.get("model"), str) and config["model"]:
            return config["model"]
    return settings.S2S_DEFAULT_MODEL


def groups(session_id: str, api_key_id: int | None, call_id: str | None) -> list[str]:
    """The channel-layer groups a session's mailbox joins: its own, its owner's API key's (the key that opened it,
    minted its secret, or owns its phone call: revoking the key ends it), its call's."""
    groups = [cluster.session_group(session_id)]
    if api_key_id is not None:
        groups.append(cluster.key_group(api_key_id))
    if call_id is not None:
        groups.append(cluster.call_group(call_id))
    return groups
