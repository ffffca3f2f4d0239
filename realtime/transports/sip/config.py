"""The SIP listener's settings as plain values (import-cheap: the settings build them)."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any

NUMBER_POLICIES = ("full", "masked", "none")
SRTP_POLICIES = ("off", "optional", "required")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def within(host: str, networks: tuple[Network, ...]) -> bool:
    """Whether ``host`` is an IP address in one of ``networks`` (``S2S_SIP_TRUSTED``'s); a name is in none."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


class SipConfigError(ValueError):
    """A SIP setting that cannot be used (the settings turn it into ``ImproperlyConfigured``)."""


@dataclass(frozen=True)
class SipConfig:
    """``S2S_SIP_*``: where to listen, which RTP ports to use, how calls are answered and recorded."""

    host: str = ""  # empty: no SIP listener
    port: int = 5060
    advertised_ip: str = ""  # the address in SDP and Contact (NAT); empty: the bound one
    rtp_ports: tuple[int, int] = (10000, 20000)
    rtp_timeout_s: float = 30.0  # no RTP (nor RTCP) from the caller for this long: the call is over
    webhook_url: str = ""  # realtime.call.incoming goes there; empty: a default session answers
    webhook_secret: str = ""  # whsec_...: the webhooks are signed as OpenAI signs them
    accept_timeout_s: float = 20.0  # a ringing call nobody accepted is declined (480) after this
    numbers: str = "masked"  # what the audit keeps of the caller's and callee's numbers
    session: dict[str, Any] = field(default_factory=dict)  # the default session (no webhook)
    owner_key: str = ""  # the name of the API key that owns the calls (realtime.access.owner); empty: staff alone
    users: dict[str, str] = field(default_factory=dict, repr=False)  # digest logins that may ring (S2S_SIP_USERS)
    trusted: tuple[Network, ...] = ()  # networks that ring without credentials (the trunk)
    realm: str = "s2s-realtime"  # the digest realm of the 401 challenge
    digest_algorithms: tuple[str, ...] = ("MD5",)  # challenged (and accepted), in order of preference
    tls_host: str = ""  # empty: no SIP over TLS
    tls_port: int = 5061
    tls_cert: str = ""  # PEM paths of the TLS listener's certificate chain and key
    tls_key: str = ""
    srtp: str = "optional"  # off: plain RTP only; optional: SRTP when offered; required: only SRTP (488 else)
    # SIP over TCP and TLS: a connection that carries no call and sends nothing this long is closed; at most
    # this many connections from one address, and in all (a trunk carries many calls on one connection).
    tcp_idle_s: float = 30.0
    tcp_max_per_address: int = 32
    tcp_max_connections: int = 256
    # INVITEs that became calls (ringing or answered) held at once, from one address and in all: beyond, 503
    # and nothing held. A trunk carries all its calls from one address, so the first is above the largest pool.
    max_calls_per_address: int = 256
    max_calls: int = 1024
    # Outbound calls (POST /v1/realtime/calls with {"sip": ...}, realtime.transports.sip.outbound): off until
    # outbound_allow names what may be dialled (glob patterns over the target URI).
    outbound_allow: tuple[str, ...] = ()
    outbound_proxy: tuple[str, int, str] | None = None  # where INVITEs go (the trunk) and how; None: the target's host
    outbound_tls_ca: str = ""  # a PEM file of the CAs a TLS callee or trunk is checked against; empty: the system's
    outbound_from: str = ""  # the From URI when the request names none; empty: sip:s2s@<the advertised address>
    outbound_user: str = ""  # digest credentials for the trunk's 401/407 challenge
    outbound_password: str = field(default="", repr=False)
    ring_timeout_s: float = 30.0  # not answered in this long: CANCEL, no_answer
    outbound_per_minute: int = 10  # calls one API key may place a minute (0: no limit)
    outbound_per_key: int = 5  # calls one API key may hold at once, dialling or answered (0: no limit)

    @property
    def enabled(self) -> bool:
        return bool(self.host)

    @property
    def authenticates(self) -> bool:
        """Whether an INVITE must come from a trusted address or carry a login (else anyone may ring)."""
        return bool(self.users or self.trusted)

    @property
    def media_ip(self) -> str:
        """The address the RTP sockets bind to (0.0.0.0 listens on every interface)."""
        return self.host

    @property
    def media_family(self) -> int:
        """The IP version of the RTP sockets (4 or 6): an offer's audio address must be of it."""
        try:
            return ipaddress.ip_address(self.media_ip).version
        except ValueError:
            return 4

    @property
    def sdp_ip(self) -> str:
        """The address a caller is told to send RTP to."""
        if self.advertised_ip:
            return self.advertised_ip
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host

    @property
    def tls_contact(self) -> tuple[str, int]:
        """The address the TLS listener's Contact names (as :attr:`sdp_ip` does for UDP and TCP)."""
        if self.advertised_ip:
            return self.advertised_ip, self.tls_port
        return ("127.0.0.1" if self.tls_host in ("0.0.0.0", "::") else self.tls_host), self.tls_port

    def recorded_number(self, number: str) -> str:
        """A caller's or callee's number as the audit keeps it (``S2S_SIP_NUMBERS``)."""
        if self.numbers == "none" or not number:
            return ""
        if self.numbers == "full":
            return number[:100]
        return ("*" * max(0, len(number) - 4) + number[-4:])[:100]


def parse_bind(raw: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:5060`` for IPv6); raises :class:`SipConfigError`."""
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not host:
        raise SipConfigError(f"{raw!r} is not host:port")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise SipConfigError(f"{raw!r} needs an IP address and a port number") from None
    if not 0 <= number <= 65535:
        raise SipConfigError(f"{raw!r}: the port is out of range")
    return host, number


def parse_port_range(raw: str) -> tuple[int, int]:
    """``10000-20000``: an even first port and room for at least one RTP/RTCP pair."""
    low, sep, high = raw.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        raise SipConfigError(f"{raw!r} is not a port range like 10000-20000") from None
    if not sep or not 1024 <= first < last <= 65535 or last - first < 2:
        raise SipConfigError(f"{raw!r}: ports 1024-65535, with room for one RTP/RTCP pair")
    return first, last


def parse_session(raw: str) -> dict[str, Any]:
    """The default session's settings, as ``/accept`` takes them (JSON object)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SipConfigError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SipConfigError("must be a JSON object of session settings")
    return value


def parse_users(raw: str) -> dict[str, str]:
    """``user:password,user2:password2`` (a password may hold ``:``, not ``,``); raises :class:`SipConfigError`."""
    users: dict[str, str] = {}
    for entry in raw.split(","):
        if not entry.strip():
            continue
        user, sep, password = entry.strip().partition(":")
        if not sep or not user or not password:
            raise SipConfigError(f"{entry.strip()!r} is not user:password")
        if not re.fullmatch(r"[A-Za-z0-9._~+-]+", user):
            raise SipConfigError(f"{user!r}: a SIP user is letters, digits and . _ ~ + -")
        if user in users:
            raise SipConfigError(f"{user!r} is named twice")
        users[user] = password
    return users


DIGEST_ALGORITHMS = ("SHA-256", "MD5")


def parse_digest_algorithms(raw: str) -> tuple[str, ...]:
    """``MD5``, ``SHA-256`` or both in order of preference (``SHA-256,MD5``)."""
    names = tuple(name.strip().upper() for name in raw.split(",") if name.strip())
    if not names or any(name not in DIGEST_ALGORITHMS for name in names) or len(set(names)) != len(names):
        raise SipConfigError(f"{raw!r}: digest algorithms are SHA-256 and/or MD5, comma-separated")
    return names


def parse_trusted(raw: str) -> tuple[Network, ...]:
    """``203.0.113.10,198.51.100.0/24``: addresses and networks admitted without credentials."""
    networks = []
    for entry in raw.split(","):
        if entry.strip():
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise SipConfigError(f"{entry.strip()!r} is not an IP address or a network") from None
    return tuple(networks)


def parse_allow(raw: str) -> tuple[str, ...]:
    """``sip:+4420*@trunk.example,sip:*@127.0.0.1:*``: glob patterns over the target URI (fnmatch, case-sensitive)."""
    patterns = tuple(entry.strip() for entry in raw.split(",") if entry.strip())
    for pattern in patterns:
        if not pattern.startswith("sip:") or any(char in pattern for char in " \t\r\n<>;"):
            raise SipConfigError(f"{pattern!r}: an allowed target is a sip: URI pattern (no spaces, <, >, ;)")
    return patterns


def parse_proxy(raw: str) -> tuple[str, int, str] | None:
    """``host:port`` (an IP address) and the transport to it, ``;transport=udp`` (the default), ``tcp`` or
    ``tls``; empty: none."""
    address, _, params = raw.strip().partition(";")
    if not address:
        return None
    transport = params.strip().lower().removeprefix("transport=") if params else "udp"
    if transport not in ("udp", "tcp", "tls") or (params and not params.strip().lower().startswith("transport=")):
        raise SipConfigError(f"{raw!r}: the transport to the trunk is ;transport=udp, tcp or tls")
    return (*parse_bind(address), transport)
