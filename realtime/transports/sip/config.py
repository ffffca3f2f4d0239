"""The SIP listener's settings as plain values (import-cheap: the settings build them)."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

NUMBER_POLICIES = ("full", "masked", "none")


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

    @property
    def enabled(self) -> bool:
        return bool(self.host)

    @property
    def media_ip(self) -> str:
        """The address the RTP sockets bind to (0.0.0.0 listens on every interface)."""
        return self.host

    @property
    def sdp_ip(self) -> str:
        """The address a caller is told to send RTP to."""
        if self.advertised_ip:
            return self.advertised_ip
        return "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host

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
