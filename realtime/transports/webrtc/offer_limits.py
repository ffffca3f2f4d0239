"""What an SDP offer may contain, checked by its size and by counting its lines before anything parses it.

aiortc's parser expands every ``a=rtcp-fb:*`` line over every codec of its m-line, so an offer of
63 KB (1,650 ``a=rtpmap`` and 2,150 ``a=rtcp-fb:* n`` lines) took 11-34 s of the event loop and
kept 360 MiB. Here each kind of line is counted first (one pass over the text, linear in its
size) and an offer over a cap is refused with a 400 that names it (a wildcard feedback line counts
once per codec, as aiortc expands it); the caps leave a browser's
audio, video and data offer several times the room it needs (Chromium's: 3 m-lines, about 40
codecs, 60 feedback lines, 2-12 candidates).

Candidates are also where the offer chooses whom the server sends connectivity checks to: beyond
the count, candidates on loopback or link-local addresses are dropped (the server would probe its
own host or link for the client) unless the server itself was reached on loopback.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass

from django.conf import settings

from realtime.transports.calls import BadOffer


@dataclass(frozen=True)
class OfferCaps:
    """The largest offer, and the most of each kind of SDP line one offer may have (``S2S_MAX_SDP_*``)."""

    size: int  # bytes
    lines: int
    media: int
    codecs: int
    feedback: int
    candidates: int

    @classmethod
    def from_settings(cls) -> OfferCaps:
        return cls(
            size=settings.S2S_MAX_SDP_BYTES,
            lines=settings.S2S_MAX_SDP_LINES,
            media=settings.S2S_MAX_SDP_MEDIA,
            codecs=settings.S2S_MAX_SDP_CODECS,
            feedback=settings.S2S_MAX_SDP_FEEDBACK,
            candidates=settings.S2S_MAX_SDP_CANDIDATES,
        )


# line prefix -> (the cap's field, what the message calls it, its setting)
COUNTED = {
    "m=": ("media", "m-lines", "S2S_MAX_SDP_MEDIA"),
    "a=rtpmap:": ("codecs", "a=rtpmap lines (codecs)", "S2S_MAX_SDP_CODECS"),
    "a=rtcp-fb:": ("feedback", "a=rtcp-fb entries (a=rtcp-fb:* counts once per codec)", "S2S_MAX_SDP_FEEDBACK"),
    "a=candidate:": ("candidates", "a=candidate lines", "S2S_MAX_SDP_CANDIDATES"),
}


def check(sdp: str, caps: OfferCaps) -> None:
    """Refuses an offer larger than its cap, with more lines of a kind than their cap, or with the same ``a=mid``
    twice (which aiortc cannot answer); counts only, parses nothing."""
    if len(sdp.encode()) > caps.size:
        raise BadOffer(f"The SDP offer is larger than {caps.size} bytes.")
    lines = sdp.splitlines()
    if len(lines) > caps.lines:
        raise BadOffer(
            f"The SDP offer has {len(lines)} lines; at most {caps.lines} are allowed (S2S_MAX_SDP_LINES).",
            code="offer_too_complex",
        )
    counts: Counter[str] = Counter()
    mids: set[str] = set()
    wildcards = 0
    for line in lines:
        for prefix, (field, _, _) in COUNTED.items():
            if line.startswith(prefix):
                counts[field] += 1
        if line.startswith("a=rtcp-fb:*"):
            wildcards += 1
        if line.startswith("a=mid:"):
            mid = line[6:].strip()
            if mid in mids:
                raise BadOffer(f"The SDP offer names a=mid:{mid} twice: every m-line needs its own mid.")
            mids.add(mid)
    # aiortc gives a wildcard line to every codec of its m-line: that is what parsing costs
    counts["feedback"] += wildcards * (max(1, counts["codecs"]) - 1)
    for field, what, setting in COUNTED.values():
        cap = getattr(caps, field)
        if counts[field] > cap:
            raise BadOffer(
                f"The SDP offer has {counts[field]} {what}; at most {cap} are allowed ({setting}).",
                code="offer_too_complex",
            )


def is_local_target(address: str) -> bool:
    """A loopback, link-local, unspecified or multicast address (a host name, e.g. mDNS ``.local``: False)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


def candidate_address(line: str) -> str:
    """The connection address of an ``a=candidate:`` line (its fifth field), or ""."""
    fields = line.split()
    return fields[4] if len(fields) > 4 else ""


def without_local_candidates(sdp: str) -> tuple[str, int]:
    """The offer without its candidates on local targets (:func:`is_local_target`), and how many went."""
    kept: list[str] = []
    dropped = 0
    for line in sdp.split("\n"):
        if line.startswith("a=candidate:") and is_local_target(candidate_address(line.strip())):
            dropped += 1
        else:
            kept.append(line)
    return "\n".join(kept), dropped


def local_targets_allowed(server: tuple[str, int] | list | None) -> bool:
    """Whether the client may point the server at loopback and link-local addresses: only when it reached
    the server on a loopback address itself (``S2S_WEBRTC_LOCAL_CANDIDATES``: ``auto``), or as configured."""
    policy = settings.S2S_WEBRTC_LOCAL_CANDIDATES
    if policy != "auto":
        return policy == "allow"
    host = str(server[0]) if server else ""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
