"""SRTP keyed in the SDP (SDES, RFC 4568): which offers are taken, our ``a=crypto`` answer, protect and unprotect.

An offer's ``a=crypto:<tag> AES_CM_128_HMAC_SHA1_80 inline:<base64 key||salt>`` lines
(or ``_32``) give the caller's master key; the answer names the tag taken and a key of our
own, drawn for each call. libsrtp (``pylibsrtp``, aiortc's binding) encrypts and
authenticates both ways, RTP and RTCP. The keys travel in clear in the SDP, so SDES keeps
the audio secret only if the signalling is encrypted too (SIP over TLS).

``S2S_SIP_SRTP`` decides: ``off`` answers plain offers only (``RTP/SAVP`` is refused),
``optional`` takes SRTP when the offer has a usable ``a=crypto`` line, ``required`` refuses
any offer without one. A refusal is ``488 Not Acceptable Here``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass

import pylibsrtp

# Suites libsrtp runs, in our order of preference, with their profile (both: a 30-byte master key and salt).
SUITES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}
KEY_BYTES = 30  # 16 bytes of AES-128 key, 14 of salt
SECURE_PROFILES = {"RTP/SAVP", "RTP/SAVPF"}
_CRYPTO = re.compile(r"^(\d{1,9})\s+(\S+)\s+inline:([A-Za-z0-9+/=]+)(\|[^\s]*)?\s*$")


class Unacceptable(Exception):
    """An offer the SRTP policy refuses (the INVITE is answered 488)."""


@dataclass(frozen=True)
class Crypto:
    """One ``a=crypto`` line of an offer that we can take."""

    tag: str
    suite: str
    key: bytes


OFFERED_CRYPTO_TAG = "1"  # an outbound call offers one suite, the first of SUITES
OFFERED_SUITE = "AES_CM_128_HMAC_SHA1_80"


def offered_crypto(tag: str, key: bytes) -> str:
    """An outbound call's ``a=crypto`` offer: our key for :data:`OFFERED_SUITE` (the callee answers with its own)."""
    return f"{tag} {OFFERED_SUITE} inline:{base64.b64encode(key).decode()}"


def parse_crypto(value: str) -> Crypto | None:
    """An ``a=crypto`` value we can take, or None (another suite, a key of the wrong size, an MKI, session params)."""
    match = _CRYPTO.match(value.strip())
    if match is None or match.group(2) not in SUITES:
        return None
    tag, suite, encoded, extra = match.groups()
    if extra and extra.count("|") > 1:  # "|lifetime|MKI:length": an MKI, which we do not take
        return None
    if extra and ":" in extra:
        return None
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return Crypto(tag, suite, key) if len(key) == KEY_BYTES else None


def choose(proto: str, crypto_lines: list[str], policy: str) -> Crypto | None:
    """The offer's crypto this server answers with, None for plain RTP; raises :class:`Unacceptable`."""
    secure = proto.upper() in SECURE_PROFILES
    if policy == "off":
        if secure:
            raise Unacceptable(f"the offer is {proto} (SRTP) and S2S_SIP_SRTP=off")
        return None
    offered = [crypto for crypto in map(parse_crypto, crypto_lines) if crypto is not None]
    offered.sort(key=lambda crypto: list(SUITES).index(crypto.suite))
    if offered:
        return offered[0]
    if secure:
        raise Unacceptable(f"the offer is {proto} with no a=crypto line this server takes (AES_CM_128_HMAC_SHA1_80/32)")
    if policy == "required":
        raise Unacceptable("the offer is plain RTP and S2S_SIP_SRTP=required")
    return None


class SrtpContext:
    """One call's SRTP: the caller's key for what comes in, ours for what goes out."""

    def __init__(self, offered: Crypto, local_key: bytes | None = None) -> None:
        self.offered = offered
        self.local_key = local_key or os.urandom(KEY_BYTES)
        profile = SUITES[offered.suite]
        self._inbound = pylibsrtp.Session(
            pylibsrtp.Policy(key=offered.key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_INBOUND, srtp_profile=profile)
        )
        self._outbound = pylibsrtp.Session(
            pylibsrtp.Policy(key=self.local_key, ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=profile)
        )
        self.rejected = 0  # packets in that failed authentication or replay checks
        self.unsent = 0  # packets out that libsrtp would not protect

    @property
    def answer(self) -> str:
        """The answer's ``a=crypto`` value: the offer's tag and suite, our key."""
        return f"{self.offered.tag} {self.offered.suite} inline:{base64.b64encode(self.local_key).decode()}"

    def protect(self, packet: bytes, rtcp: bool) -> bytes | None:
        """The packet encrypted and signed, or None (counted) for one libsrtp refuses (a sequence number sent twice)."""
        try:
            return self._outbound.protect_rtcp(packet) if rtcp else self._outbound.protect(packet)
        except pylibsrtp.Error:
            self.unsent += 1
            return None

    def unprotect(self, packet: bytes, rtcp: bool) -> bytes | None:
        """The clear packet, or None (counted) for one that does not authenticate, is replayed or is not SRTP."""
        try:
            return self._inbound.unprotect_rtcp(packet) if rtcp else self._inbound.unprotect(packet)
        except pylibsrtp.Error:
            self.rejected += 1
            return None
