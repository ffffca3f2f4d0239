"""What an outbound call may ask for, checked before anything is dialled: pure rules, no sockets, no Django.

``POST /v1/realtime/calls`` with ``{"sip": {"to", "from", "headers"}, "session": {...}}`` names a target. Toll
fraud is the classic attack on anything that dials, so the target must match ``S2S_SIP_OUTBOUND_ALLOW`` (glob
patterns over the whole URI; none set: outbound is off) and every part that becomes a header line is held to a
narrow shape: ``to`` and ``from`` are plain ``sip:user@host[:port]`` URIs (no ``;`` parameters, no ``?``
headers, no spaces, CR or LF), extra headers are ``X-`` names with printable values. A final SIP status maps to
the call's status (:func:`status_of`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

MAX_URI = 256
TRANSPORT_PARAM = r"(?:;transport=(?P<transport>udp|tcp|tls))?"
TRANSPORTS = ("udp", "tcp", "tls")
DEFAULT_PORTS = {"udp": 5060, "tcp": 5060, "tls": 5061}
MAX_HEADERS = 16
MAX_HEADER_VALUE = 256
# sip:user@host[:port]: the user part as RFC 3261's unreserved and user-unreserved characters (and %-escapes),
# the host a name, an IPv4 address or a bracketed IPv6 one. Nothing else: no parameters, no headers. A target may
# be sips: (TLS) and may end in one parameter, ;transport=udp|tcp|tls (TARGET_URI); a From may not.
SIP_URI = re.compile(
    r"^(?P<scheme>sip):(?P<user>[A-Za-z0-9\-_.!~*'()&=+$,%]{1,64})@"
    r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9\-.]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)
TARGET_URI = re.compile(SIP_URI.pattern.replace("(?P<scheme>sip)", "(?P<scheme>sips?)")[:-1] + TRANSPORT_PARAM + "$")
HEADER_NAME = re.compile(r"^X-[A-Za-z0-9\-]{1,64}$")
STATUSES = ("dialing", "ringing", "answered", "busy", "no_answer", "rejected", "failed", "ended")
BUSY = frozenset({486, 600})
NOT_ANSWERED = frozenset({408, 480})


class BadTarget(Exception):
    """A request this server will not dial: ``status`` (400, 403) with the API's ``code`` and ``param``."""

    def __init__(self, message: str, param: str, code: str = "invalid_request", status: int = 400) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status


@dataclass(frozen=True)
class Target:
    """Whom to call, as checked: the URI, the From URI ("" the default), the extra ``X-`` headers."""

    to: str
    from_uri: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        """How the INVITE goes when no proxy says otherwise: ``tls`` for ``sips:``, else the URI's ``;transport=``
        (``udp`` when it names none)."""
        match = TARGET_URI.match(self.to)
        assert match is not None  # checked by read()
        return "tls" if match["scheme"] == "sips" else match["transport"] or "udp"

    @property
    def secure(self) -> bool:
        """A ``sips:`` target: TLS to the callee, and SRTP offered (RFC 3261 s26.2)."""
        return self.to.startswith("sips:")

    @property
    def host_port(self) -> tuple[str, int]:
        """The URI's host (brackets off) and port (5060, 5061 for TLS, when it names none)."""
        match = TARGET_URI.match(self.to)
        assert match is not None  # checked by read()
        return match["host"].strip("[]"), int(match["port"] or DEFAULT_PORTS[self.transport])


def check_uri(value: Any, param: str, target: bool = False) -> str:
    """A plain ``sip:user@host[:port]`` URI (a ``target`` may be ``sips:`` and end in ``;transport=udp|tcp|tls``),
    or :class:`BadTarget` (400)."""
    if not isinstance(value, str) or not value:
        raise BadTarget(f"{param} must be a sip: URI (sip:user@host).", param)
    shape = TARGET_URI if target else SIP_URI
    match = shape.match(value) if len(value) <= MAX_URI else None
    if match is None:
        allowed = "only ;transport=udp|tcp|tls" if target else "no parameters (;)"
        raise BadTarget(
            f"{param} must be a plain sip:user@host[:port] URI: {allowed}, no headers (?), spaces or line breaks.",
            param,
        )
    if target and match["scheme"] == "sips" and match["transport"] == "udp":
        raise BadTarget(f"{param}: a sips: URI goes over TLS, not UDP.", param)
    port = match["port"]
    if port is not None and not 1 <= int(port) <= 65535:
        raise BadTarget(f"{param}: the port is out of range.", param)
    host = match["host"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            raise BadTarget(f"{param}: {host} is not an IPv6 address.", param) from None
    return value


def check_headers(value: Any) -> dict[str, str]:
    """Extra headers of the INVITE: at most :data:`MAX_HEADERS` ``X-`` names with printable values."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadTarget("sip.headers must be an object of X- header names and values.", "sip.headers")
    if len(value) > MAX_HEADERS:
        raise BadTarget(f"sip.headers: at most {MAX_HEADERS} headers.", "sip.headers")
    headers: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise BadTarget(f"sip.headers: {str(name)[:80]!r} is not an X- header name.", "sip.headers")
        if not isinstance(text, str) or len(text) > MAX_HEADER_VALUE or not text.isprintable():
            raise BadTarget(
                f"sip.headers.{name}: a value is printable text of at most {MAX_HEADER_VALUE} characters.",
                f"sip.headers.{name}",
            )
        if name.lower() in {existing.lower() for existing in headers}:
            raise BadTarget(f"sip.headers: {name!r} is named twice.", "sip.headers")
        headers[name] = text
    return headers


def read(body: Any) -> tuple[Target, dict[str, Any] | None]:
    """The target and the session settings of a request's JSON body; raises :class:`BadTarget` (400)."""
    if not isinstance(body, dict):
        raise BadTarget("The request body must be a JSON object with 'sip' and 'session'.", "sip")
    sip = body.get("sip")
    if not isinstance(sip, dict):
        raise BadTarget(
            "A JSON body places a phone call: 'sip' must be an object naming the target ('to'). A WebRTC offer is "
            "sent as 'Content-Type: application/sdp' or as the 'sdp' field of a multipart form.",
            "sip",
        )
    unknown = set(sip) - {"to", "from", "headers"}
    if unknown:
        raise BadTarget(f"sip: unknown field {sorted(unknown)[0][:80]!r}.", "sip")
    target = Target(
        check_uri(sip.get("to"), "sip.to", target=True),
        check_uri(sip["from"], "sip.from") if sip.get("from") is not None else "",
        check_headers(sip.get("headers")),
    )
    session = body.get("session")
    if session is not None and not isinstance(session, dict):
        raise BadTarget("'session' must be an object of session settings.", "session")
    return target, session


def allow_form(uri: str) -> str:
    """The URI the allow-list is matched against: whom it calls, however it gets there (``sips:`` as ``sip:``, no
    ``;transport=``)."""
    plain = uri.split(";", 1)[0]
    return "sip:" + plain[5:] if plain.startswith("sips:") else plain


def check_allowed(uri: str, patterns: tuple[str, ...]) -> None:
    """Raises :class:`BadTarget` (403) unless a pattern of ``S2S_SIP_OUTBOUND_ALLOW`` matches ``uri`` (as
    :func:`allow_form` writes it)."""
    uri = allow_form(uri)
    if not patterns:
        raise BadTarget(
            "Outbound calls are off on this server: S2S_SIP_OUTBOUND_ALLOW names no target.",
            "sip.to",
            "outbound_not_allowed",
            403,
        )
    if not any(fnmatchcase(uri, pattern) for pattern in patterns):
        message = "This target is not one this server may call (S2S_SIP_OUTBOUND_ALLOW)."
        raise BadTarget(message, "sip.to", "outbound_not_allowed", 403)


def user_of(uri: str) -> str:
    """The user part of a ``sip:``/``sips:`` URI (a phone number, or a SIP user); "" when it names none."""
    scheme, _, rest = uri.partition(":")
    user, at, _ = rest.partition("@")
    return user if scheme in ("sip", "sips") and at else ""


def status_of(code: int) -> str:
    """The call's status after a final SIP answer of ``code`` (3xx-6xx) to its INVITE."""
    if code in BUSY:
        return "busy"
    if code in NOT_ANSWERED:
        return "no_answer"
    if 500 <= code <= 599:
        return "failed"
    return "rejected"
