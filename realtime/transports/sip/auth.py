"""Who may ring the SIP listener: the trunk's addresses (``S2S_SIP_TRUSTED``), or a digest login (``S2S_SIP_USERS``).

RFC 3261 section 22 with RFC 7616/8760's digest: an INVITE from an untrusted address
without valid credentials is answered ``401 Unauthorized`` with a challenge
(``qop="auth"``; MD5, or SHA-256 too with ``S2S_SIP_DIGEST_ALGORITHMS``: phones on libre 1.x,
baresip's stack, give up on a challenge that offers any algorithm but MD5), before anything is
claimed; the phone retries with an ``Authorization`` header. Nonces are the server's own, ``<time>.<HMAC of the time>``
under a secret of this process, so none is stored: one older than :data:`NONCE_TTL_S`
is refused as ``stale=true`` (the phone retries without asking for the password again).
A nonce's count (``nc``) must grow, so an overheard ``Authorization`` cannot ring again.
Pure Python: no aiosipua here; :mod:`signalling` sends the answers.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from realtime.transports.sip.config import Network, within

NONCE_TTL_S = 300.0  # a challenge is good this long; then a retry is told stale=true
MAX_NONCES = 10_000  # nonce counts remembered (only nonces that authenticated someone)
ALGORITHMS: dict[str, Callable[..., Any]] = {"SHA-256": hashlib.sha256, "MD5": hashlib.md5}
_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)\s*,?')


def parse_digest(header: str) -> dict[str, str]:
    """An ``Authorization: Digest k=v, k="v"`` header's parameters (names lower-cased); empty if not Digest."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "digest":
        return {}
    params: dict[str, str] = {}
    position = 0
    while position < len(rest):
        match = _PARAM.match(rest, position)
        if match is None or match.end() == position:
            return {}  # not a parameter list: nothing can be trusted in it
        name, value = match.group(1).lower(), match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[name] = value
        position = match.end()
    return params


@dataclass(frozen=True)
class Verdict:
    """What to answer an INVITE: ``user`` set (or ``trusted``): go on; else ``status`` 401 (``stale``) or 403."""

    status: int = 0
    user: str = ""
    trusted: bool = False
    stale: bool = False
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.status == 0


def _same(given: str, expected: str) -> bool:
    """A constant-time comparison of any text (``compare_digest`` refuses non-ASCII ``str``; a header may hold
    lone surrogates, the parser's escapes of undecodable bytes)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


class DigestAuth:
    """The listener's gate: :meth:`check` an INVITE's source and ``Authorization``, :meth:`challenge` headers."""

    def __init__(
        self,
        users: dict[str, str],
        trusted: tuple[Network, ...],
        realm: str,
        algorithms: tuple[str, ...] = ("MD5",),
        clock: Callable[[], float] = time.time,
        secret: bytes | None = None,
    ) -> None:
        self.users = dict(users)
        self.trusted = trusted
        self.realm = realm
        self.algorithms = algorithms
        self._clock = clock
        self._secret = secret or os.urandom(32)
        self._counts: dict[str, int] = {}  # nonce -> the highest nc it authenticated with

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.trusted)

    def nonce(self) -> str:
        stamp = f"{int(self._clock()):x}"
        return f"{stamp}.{self._sign(stamp)}"

    def challenge(self, stale: bool = False) -> list[str]:
        """The ``WWW-Authenticate`` values of a 401, one per algorithm in our order of preference (RFC 8760 s2.4)."""
        nonce = self.nonce()
        return [
            f'Digest realm="{self.realm}", nonce="{nonce}", algorithm={name}, qop="auth"'
            + (", stale=true" if stale else "")
            for name in self.algorithms
        ]

    def check(self, source_ip: str, method: str, authorizations: list[str]) -> Verdict:
        """Whether this request may go on: from a trusted address, or with one good ``Authorization`` for our realm."""
        if not self.enabled:
            return Verdict(trusted=True)
        if within(source_ip, self.trusted):
            return Verdict(trusted=True)
        if not self.users:
            return Verdict(403, reason="not a trusted address")
        if not authorizations:
            return Verdict(401, reason="no credentials")
        parsed = [parse_digest(header) for header in authorizations]
        params = next((p for p in parsed if p.get("realm") == self.realm), None)
        if params is None:
            if not any(parsed):
                return Verdict(403, reason="credentials that are not Digest")
            return Verdict(401, reason="credentials for another realm")
        user = params.get("username", "")
        password = self.users.get(user)
        response = self._expected(params, method, password) if password is not None else None
        if response is None or not _same(response, params.get("response", "").lower()):
            return Verdict(403, reason=f"bad credentials for {user[:40]!r}")
        nonce = params["nonce"]
        stamp, _, signature = nonce.partition(".")
        if not _same(signature, self._sign(stamp)):
            return Verdict(401, stale=True, reason="a nonce this process did not make")
        age = self._clock() - int(stamp, 16)
        if not 0 <= age <= NONCE_TTL_S:
            return Verdict(401, stale=True, reason="an expired nonce")
        count = int(params["nc"], 16) if params.get("qop") else 1  # without qop: a nonce serves once
        if count <= self._counts.get(nonce, 0):
            return Verdict(401, stale=True, reason="a replayed nonce count")
        self._remember(nonce, count)
        return Verdict(user=user)

    def _expected(self, params: dict[str, str], method: str, password: str) -> str | None:
        """The right ``response`` for these parameters, or None if they are incomplete or ask for what we lack."""
        algorithm = params.get("algorithm", "MD5").upper()
        digest = ALGORITHMS.get(algorithm) if algorithm in self.algorithms else None
        nonce, uri, qop = params.get("nonce", ""), params.get("uri", ""), params.get("qop", "")
        if digest is None or not nonce or not uri or "." not in nonce:
            return None

        def h(text: str) -> str:
            return digest(text.encode("utf-8", "surrogatepass")).hexdigest()

        ha1 = h(f"{params['username']}:{self.realm}:{password}")
        ha2 = h(f"{method}:{uri}")
        if not qop:
            return h(f"{ha1}:{nonce}:{ha2}")  # RFC 2069, as RFC 3261 still allows
        nc, cnonce = params.get("nc", ""), params.get("cnonce", "")
        if qop != "auth" or not re.fullmatch(r"[0-9a-fA-F]{8}", nc) or not cnonce:
            return None
        return h(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")

    def _sign(self, stamp: str) -> str:
        return hmac.new(self._secret, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def _remember(self, nonce: str, count: int) -> None:
        if nonce not in self._counts and len(self._counts) >= MAX_NONCES:
            now = self._clock()
            self._counts = {
                kept: seen
                for kept, seen in self._counts.items()
                if now - int(kept.partition(".")[0], 16) <= NONCE_TTL_S
            }
            while len(self._counts) >= MAX_NONCES:  # all still young: the oldest go (their calls re-authenticate)
                del self._counts[next(iter(self._counts))]
        self._counts[nonce] = count
