"""The audio of one phone call: RTP with G.711 (aiortp), into the pipeline's format and the reply out, paced.

aiortp does the RTP: G.711 μ-law and A-law at 8 kHz, its jitter buffer (reordering, loss
concealment) and RFC 4733 telephone events. This module guards the socket (only the caller's
hosts are heard, the SDP's and the signalling's, and of them only the address and port the first
packet came from: symmetric RTP latches once, so RTP from a stranger, or from another port of the
caller's host, is dropped and counted, never followed), converts 8 kHz to the
session's ``audio/pcm`` with soxr, and plays the reply as one 20 ms frame per 20 ms of a
drift-free clock (aiortp's ``MediaClock``), silence when there is nothing to say, so the
caller's jitter buffer sees a steady stream and a reply never arrives in a burst. With
SRTP (an offer's ``a=crypto``, :mod:`realtime.transports.sip.srtp`), every packet is unprotected as it comes off the
socket, before aiortp reads it, and protected as aiortp hands it to the socket.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from aiortp import RTPSession
from aiortp.clock import MediaClock
from aiortp.port_allocator import PortAllocator
from aiosipua import SdpMessage, build_sdp, negotiate_sdp

from pipelines import audio
from realtime.transports.playout import ReplyQueue
from realtime.transports.sip import guard
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.srtp import (
    KEY_BYTES,
    OFFERED_CRYPTO_TAG,
    OFFERED_SUITE,
    SECURE_PROFILES,
    Crypto,
    SrtpContext,
    Unacceptable,
    choose,
    offered_crypto,
    parse_crypto,
)

logger = logging.getLogger(__name__)

RATE = 8000  # G.711
FRAME_S = 0.020
FRAME_SAMPLES = int(RATE * FRAME_S)
G711 = [0, 8]  # payload types: PCMU, PCMA
OFFERED_DTMF = 101  # the payload type an outbound call's offer gives RFC 4733 events
FAILED_SENDS = guard.PeerLog("RTP: a send")
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
ANSWERED_DIRECTION = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly", "inactive": "inactive"}


class NoCommonCodec(Exception):
    """The offer has no audio this server speaks, or not as ``S2S_SIP_SRTP`` wants it (the INVITE is answered 488)."""


class NoPorts(Exception):
    """Every RTP port pair of ``S2S_SIP_RTP_PORTS`` is taken (the INVITE is answered 503)."""


class GuardedRTPSession(RTPSession):
    """aiortp's RTP session that hears only the caller's addresses, and knows when it last did."""

    allowed_hosts: frozenset[str] = frozenset()  # none until the call sets them: nothing is heard
    # Where the caller's RTP and RTCP come from: latched by the first packet from an allowed host that
    # authenticates (the SDP's address, or its NAT mapping), then fixed; aiortp follows it once, to answer there.
    rtp_source: tuple[str, int] | None = None
    rtcp_source: tuple[str, int] | None = None
    heard_at: float = 0.0
    refused: int = 0
    # Set right after create(), before anything is sent (the first RTCP report waits seconds, RTP the playout).
    srtp: SrtpContext | None = None

    async def _bind_transports(self, local_addr: tuple[str, int], remote_addr: tuple[str, int]) -> None:
        await super()._bind_transports(local_addr, remote_addr)
        for transport, rtcp in ((self._rtp_transport, False), (self._rtcp_transport, True)):
            assert transport is not None
            transport.send = partial(self._send, transport, transport.send, rtcp)

    def _send(
        self, transport: Any, send: Callable[..., None], rtcp: bool, data: bytes, addr: tuple[str, int] | None = None
    ) -> None:
        """Sends a packet (protected, with SRTP) to a destination checked first: asyncio closes the socket for a
        send it cannot even try (a port over 65535), so such a packet is dropped and logged once per peer."""
        wanted = addr or transport._remote_addr
        target = guard.destination(wanted)
        if target is None:
            FAILED_SENDS.failed(wanted, "not an IP address and port")
            return
        packet = self.srtp.protect(data, rtcp) if self.srtp is not None else data
        if packet is None:
            return
        try:
            send(packet, target)
        except Exception as exc:
            FAILED_SENDS.failed(target, exc)

    def _handle_rtp(self, data: bytes, addr: tuple[str, int]) -> None:
        clear = self._heard(data, addr, rtcp=False)
        if clear is not None:
            super()._handle_rtp(clear, addr)

    def _handle_rtcp(self, data: bytes, addr: tuple[str, int]) -> None:
        clear = self._heard(data, addr, rtcp=True)
        if clear is not None:
            super()._handle_rtcp(clear, addr)

    def _heard(self, data: bytes, addr: tuple[str, int], rtcp: bool) -> bytes | None:
        """The packet in clear if it is the caller's (and authenticates, with SRTP); None: dropped and counted.
        The first packet heard on each of RTP and RTCP latches its address and port; a later one from another
        port is not the caller's stream (a second host behind the same NAT, or a spoofer) and is dropped."""
        source = (str(addr[0]), int(addr[1]))
        if source[0] not in self.allowed_hosts:
            self._refuse("RTP from a stranger (%s:%s)", source)
            return None
        latched = self.rtcp_source if rtcp else self.rtp_source
        if latched is not None and source != latched:
            self._refuse("RTP from another port of the caller's host (%s:%s)", source)
            return None
        if self.srtp is not None:
            clear = self.srtp.unprotect(data, rtcp)
            if clear is None:
                self._refuse("SRTP that does not authenticate from %s:%s", source)
                return None
            data = clear
        if latched is None:
            if rtcp:
                self.rtcp_source = source
            else:
                self.rtp_source = source
        self.heard_at = time.monotonic()
        return data

    def _refuse(self, what: str, addr: tuple[str, int]) -> None:
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            logger.warning(what + " dropped (%s so far)", addr[0], addr[1], self.refused)


def telephone_event_type(offer: SdpMessage) -> int:
    """The payload type the offer gives RFC 4733 events (0: it offers none)."""
    media = offer.audio
    for codec in media.codecs if media is not None else []:
        if codec.encoding_name.lower() == "telephone-event":
            return codec.payload_type
    return 0


def direction_of(sdp: SdpMessage) -> str:
    """An SDP's audio direction: its media's ``a=`` line, else the session's, else ``sendrecv`` (RFC 3264 s5.1)."""
    for attributes in (sdp.audio.attributes if sdp.audio is not None else {}, sdp.attributes):
        for name in DIRECTIONS:
            if name in attributes:
                return name
    return "sendrecv"


def _address_of(sdp: SdpMessage) -> tuple[str, int] | None:
    try:
        return sdp.rtp_address
    except Exception:  # an address that cannot be read: offer_problem says so
        return None


class CallMedia:
    """One call's RTP session: the caller's audio in (``audio/pcm``), the reply out on the clock, DTMF."""

    def __init__(
        self,
        config: SipConfig,
        ports: PortAllocator,
        on_audio: Callable[[bytes], None],
        on_dtmf: Callable[[str], None],
        playout: ReplyQueue,
    ) -> None:
        self.config = config
        self.ports = ports
        self.playout = playout
        self._on_audio = on_audio
        self._on_dtmf = on_dtmf
        self._upsampler = audio.StreamResampler(RATE, audio.RATES[audio.PCM])
        self.session: GuardedRTPSession | None = None
        self._port: int | None = None
        self._clock: MediaClock | None = None
        self._offered_key: bytes | None = None  # an outbound call's SRTP offer: our master key and salt
        self.local_sdp: SdpMessage | None = None  # what we said last: our answer (a call answered) or offer (placed)
        self.remote: tuple[str, int] | None = None  # where the other side's SDP says its RTP is
        self.payload_type = 0  # the codec the call speaks (PCMU 0, PCMA 8), kept through re-INVITEs
        self.sending = True  # False on hold (our answer recvonly or inactive): frames are played to nobody
        self.peer_sends = True  # False while the other side's offer says it sends nothing: no RTP is expected
        self.frames_sent = 0

    async def open(self, offer: SdpMessage, signalling_host: str) -> SdpMessage:
        """Binds an RTP port pair and returns the SDP answer; raises :class:`NoCommonCodec` or :class:`NoPorts`."""
        problem = guard.offer_problem(offer, self.config.media_family, signalling_host)
        if problem is not None:
            raise NoCommonCodec(problem)
        remote = offer.rtp_address
        if remote is None:
            raise NoCommonCodec("the offer has no audio address (c= and m=audio)")
        dtmf = telephone_event_type(offer)
        assert offer.audio is not None  # rtp_address found it
        try:
            crypto = choose(offer.audio.proto, offer.audio.attributes.get("crypto", []), self.config.srtp)
        except Unacceptable as exc:
            raise NoCommonCodec(str(exc)) from None
        try:
            answer, payload_type = negotiate_sdp(
                offer, self.config.sdp_ip, 0, supported_codecs=G711, dtmf_payload_type=dtmf or 0
            )
        except Exception as exc:  # aiosipua's SdpNegotiationError, or an offer it cannot read
            raise NoCommonCodec(str(exc)) from None
        try:
            self._port, _ = await self.ports.allocate()
        except RuntimeError as exc:  # aiortp's "No available port pair in range"
            raise NoPorts(str(exc)) from None
        session = await GuardedRTPSession.create(
            local_addr=(self.config.media_ip, self._port),
            remote_addr=remote,
            payload_type=payload_type,
            clock_rate=RATE,
            dtmf_payload_type=dtmf or 101,
            symmetric_rtp=True,  # behind NAT the caller's RTP comes from elsewhere than its SDP says
        )
        if crypto is not None:
            session.srtp = SrtpContext(crypto)
        session.allowed_hosts = frozenset({remote[0], signalling_host})
        session.heard_at = time.monotonic()
        session.on_audio = self._caller_audio
        session.on_dtmf = lambda digit, _duration: self._on_dtmf(digit)
        self.session = session
        answer.audio.port = self._port
        if session.srtp is not None:
            answer.audio.attributes["crypto"] = [session.srtp.answer]
        self.local_sdp, self.payload_type, self.remote = answer, payload_type, remote
        return answer

    async def offer(self, srtp: bool = False) -> SdpMessage:
        """An outbound call's offer (PCMU, PCMA, RFC 4733 events) on an RTP port pair bound now, as ``RTP/SAVP`` with
        a key of our own (SDES) when ``srtp``; raises :class:`NoPorts`. Nothing is heard until :meth:`answered`
        names the callee's address."""
        try:
            self._port, _ = await self.ports.allocate()
        except RuntimeError as exc:
            raise NoPorts(str(exc)) from None
        offer = build_sdp(self.config.sdp_ip, self._port, 0, "PCMU", RATE, OFFERED_DTMF)
        audio = offer.audio
        assert audio is not None
        audio.formats.insert(1, "8")
        audio.attributes["rtpmap"].insert(1, "8 PCMA/8000")
        if srtp:
            self._offered_key = os.urandom(KEY_BYTES)
            audio.proto = "RTP/SAVP"
            audio.attributes["crypto"] = [offered_crypto(OFFERED_CRYPTO_TAG, self._offered_key)]
        self.local_sdp = offer
        return offer

    async def answered(self, answer: SdpMessage, signalling_host: str) -> None:
        """The callee's answer to :meth:`offer`: the RTP session to the address it names, with the codec it chose;
        raises :class:`NoCommonCodec`."""
        problem = guard.offer_problem(answer, self.config.media_family, signalling_host)
        remote = answer.rtp_address
        if problem is not None or remote is None or answer.audio is None or self._port is None:
            raise NoCommonCodec(problem or "the answer has no audio address (c= and m=audio)")
        chosen = [int(pt) for pt in answer.audio.formats if pt.isdigit() and int(pt) in G711]
        if not chosen:
            raise NoCommonCodec("the answer chose neither PCMU nor PCMA")
        # Our SRTP offer: the callee's key for the suite offered, or no call.
        crypto = self._answered_crypto(answer) if self._offered_key is not None else None
        session = await GuardedRTPSession.create(
            local_addr=(self.config.media_ip, self._port),
            remote_addr=remote,
            payload_type=chosen[0],
            clock_rate=RATE,
            dtmf_payload_type=telephone_event_type(answer) or OFFERED_DTMF,
            symmetric_rtp=True,
        )
        if crypto is not None:
            session.srtp = SrtpContext(crypto, local_key=self._offered_key)
        session.allowed_hosts = frozenset({remote[0], signalling_host})
        session.heard_at = time.monotonic()
        session.on_audio = self._caller_audio
        session.on_dtmf = lambda digit, _duration: self._on_dtmf(digit)
        self.session = session
        self.payload_type, self.remote = chosen[0], remote

    def reoffered(self, offer: SdpMessage | None, signalling_host: str) -> SdpMessage:
        """The answer to the other side's offer in a re-INVITE or UPDATE (its owner checked already): the call's SDP as
        it stands (same session id; the version one higher only if the direction changed), the codec kept; on hold
        (``sendonly``, ``inactive``) the matching direction, and frames go to nobody until ``sendrecv`` again; a new
        audio address moves RTP there (and the symmetric-RTP latch starts afresh for it). No offer: our SDP as it
        stands, as our offer. Raises :class:`NoCommonCodec` (488) with nothing changed."""
        session, current = self.session, self.local_sdp
        if session is None or current is None or current.audio is None:
            raise NoCommonCodec("the call has no media yet")
        if offer is None:
            return current
        offered = direction_of(offer)
        remote = _address_of(offer)
        if remote is not None and remote[0] == "0.0.0.0":  # hold as RFC 2543 said it (RFC 3264 s8.4): send nothing
            remote, offered = self.remote, {"sendrecv": "sendonly", "recvonly": "inactive"}.get(offered, offered)
        else:
            problem = guard.offer_problem(offer, self.config.media_family, signalling_host)
            if problem is not None or remote is None:
                raise NoCommonCodec(problem or "the offer has no audio address (c= and m=audio)")
        if offer.audio is None or str(self.payload_type) not in offer.audio.formats:
            raise NoCommonCodec(f"the offer drops the call's codec (payload type {self.payload_type})")
        answer = copy.deepcopy(current)
        assert answer.audio is not None
        for name in DIRECTIONS:
            answer.audio.attributes.pop(name, None)
            answer.attributes.pop(name, None)
        answer.audio.attributes[ANSWERED_DIRECTION[offered]] = []
        if direction_of(answer) != direction_of(current):
            answer.origin.session_version = str(int(current.origin.session_version or "0") + 1)
        if remote is not None and remote != self.remote:
            logger.info("RTP moves to %s:%s (a re-INVITE)", *remote)
            self.remote = remote
            session.update_remote(remote)
            session.allowed_hosts = frozenset({remote[0], signalling_host})
            session.rtp_source = session.rtcp_source = None
        self.sending = ANSWERED_DIRECTION[offered] in ("sendrecv", "sendonly")
        self.peer_sends = offered in ("sendrecv", "sendonly")
        session.heard_at = time.monotonic()  # a refresh from the other side is a sign of life, as its RTP is
        self.local_sdp = answer
        return answer

    @staticmethod
    def _answered_crypto(answer: SdpMessage) -> Crypto:
        """The answer's ``a=crypto`` to our SRTP offer (our tag, our suite, the callee's key); raises NoCommonCodec."""
        assert answer.audio is not None
        taken = [crypto for crypto in map(parse_crypto, answer.audio.attributes.get("crypto", [])) if crypto]
        chosen = [crypto for crypto in taken if crypto.tag == OFFERED_CRYPTO_TAG and crypto.suite == OFFERED_SUITE]
        if not chosen or answer.audio.proto.upper() not in SECURE_PROFILES:
            raise NoCommonCodec("the answer does not take our SRTP offer (RTP/SAVP, a=crypto)")
        return chosen[0]

    def start_playout(self) -> None:
        """Starts the 20 ms clock: from now on a frame goes out every 20 ms (the reply, or silence)."""
        if self._clock is None and self.session is not None:
            self._clock = MediaClock(FRAME_S, self._tick)
            self._clock.start()

    def silent_for(self) -> float:
        """Seconds since the caller's last RTP or RTCP packet (or its last re-INVITE); 0 while it holds the call
        and says it sends nothing (``a=inactive``, ``a=recvonly``): no RTP is then expected."""
        if not self.peer_sends:
            return 0.0
        return time.monotonic() - (self.session.heard_at if self.session is not None else 0.0)

    @property
    def encrypted(self) -> bool:
        return self.session is not None and self.session.srtp is not None

    async def close(self) -> None:
        if self._clock is not None:
            await self._clock.stop()
            self._clock = None
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self._port is not None:
            await self.ports.release(self._port)
            self._port = None

    def _tick(self) -> None:
        if self.session is not None:
            frame = self.playout.next_frame()  # on hold the reply plays on, to nobody
            if self.sending:
                self.session.send_audio_pcm_auto(frame)
                self.frames_sent += 1

    def _caller_audio(self, pcm: bytes, _timestamp: int) -> None:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._on_audio(audio.encode(self._upsampler.process(samples), audio.PCM))
