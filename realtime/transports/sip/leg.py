"""What a call the server answers (:class:`~realtime.transports.sip.call.SipCall`) and a call it places
(:class:`~realtime.transports.sip.outbound.OutboundCall`) share once the dialog is up: the reply's queue and the
RTP media, the other side's audio pumped into the session, the watch that hangs up when its RTP stops, the
other side's re-INVITE or UPDATE (a session refresh, hold, a new media address: :meth:`CallLeg.reoffered`), the
call's tasks, and the one release of all of them at the end (:meth:`CallLeg._release`).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiosipua import IncomingCall, SdpMessage, SipRequest, parse_sdp

from pipelines.ids import new_id
from realtime.live.core import SessionCore
from realtime.node.runtime import Runtime
from realtime.transports.playout import PlaysFromQueue, ReplyQueue
from realtime.transports.sip import uas
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.media import FRAME_SAMPLES, RATE, CallMedia, NoCommonCodec

if TYPE_CHECKING:
    from aiortp.port_allocator import PortAllocator

logger = logging.getLogger(__name__)

MAX_MICROPHONE_BACKLOG = 500  # 10 s of 20 ms frames waiting for the event loop: more is dropped


class CallLeg(PlaysFromQueue, ABC):
    """A phone call's media side as a Realtime transport (``core.PlaysAudio`` on ``self.playout``)."""

    label = "SIP call"  # how the log names it

    def __init__(self, runtime: Runtime, config: SipConfig, ports: PortAllocator) -> None:
        self.id = new_id("rtc")
        self.runtime = runtime
        self.config = config
        self.core: SessionCore | None = None
        self.playout = ReplyQueue(RATE, FRAME_SAMPLES, self._playout_started, self._playout_stopped)
        self.media = CallMedia(config, ports, self._microphone, self._dtmf, self.playout)
        self._microphone_queue: asyncio.Queue[bytes] = asyncio.Queue(MAX_MICROPHONE_BACKLOG)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reoffer: tuple[str, Callable[[], None] | None] = ("", None)  # the last re-INVITE's branch; its refusal

    def _listen(self) -> None:
        """The call is up: the reply's clock starts, the other side's audio goes to the session, RTP is watched."""
        self.media.start_playout()
        self._spawn(self._pump_microphone(), "microphone")
        self._spawn(self._watch_media(), "rtp-watch")

    @abstractmethod
    async def _no_rtp(self) -> None:
        """The other side sent no RTP (nor RTCP) for ``S2S_SIP_RTP_TIMEOUT_S``: ends the call (as each kind of
        call ends: an answered call with a BYE and its record's reason, a placed one with its status)."""

    # --- the other side's offer again (RFC 3261 s14.2, RFC 3311) ------------------------------------

    def reoffered(self, reinvite: IncomingCall) -> None:
        """An in-dialog re-INVITE, which the listener's owner check let through (its ``Call-ID``, both tags, the
        other side's host): a session refresh (RFC 4028), hold or resume (RFC 3264), a new media address. Answered
        200 with the call's SDP as it stands (:meth:`CallMedia.reoffered`; an INVITE without an offer gets it as
        ours), or 488 (400: an offer that cannot be read) with the call going on unchanged."""
        request = reinvite.invite
        try:
            answer = self.media.reoffered(_offer_of(request), str(reinvite.source_addr[0]))
        except NoCommonCodec as exc:
            logger.info("%s %s: a re-INVITE refused (488): %s", self.label, self.id, exc)
            self._reoffer = (uas.branch_of(request), uas.answer_in_dialog(reinvite, 488, "Not Acceptable Here"))
            return
        except Exception:
            logger.info("%s %s: a re-INVITE refused (400): its SDP cannot be read", self.label, self.id)
            self._reoffer = (uas.branch_of(request), uas.answer_in_dialog(reinvite, 400, "Malformed SDP"))
            return
        self._reoffer = (uas.branch_of(request), None)  # its 200 is sent again until the ACK anyway
        self._accept_reoffer(reinvite, answer)

    def repeated(self, request: SipRequest) -> bool:
        """Whether ``request`` (an in-dialog INVITE that passed the owner check) is the last re-INVITE again (its
        branch: a retransmission over UDP, its CSeq not new): its refusal is sent again, a 200 goes on being sent
        until the ACK; aiosipua would answer it 500."""
        branch, resend = self._reoffer
        if not branch or uas.branch_of(request) != branch:
            return False
        if resend is not None:
            resend()
        return True

    @abstractmethod
    def _accept_reoffer(self, reinvite: IncomingCall, answer: SdpMessage) -> None:
        """Sends the 200 with ``answer`` to a re-INVITE and awaits its ACK (as each kind of call's dialog allows)."""

    def updated(self, request: SipRequest, host: str) -> SdpMessage | None:
        """An in-dialog UPDATE (RFC 3311) that passed the owner check: its offer's answer, as for a re-INVITE; None:
        no offer (aiosipua answers 200), or one refused (aiosipua answers 488)."""
        try:
            offer = _offer_of(request)
            return self.media.reoffered(offer, host) if offer is not None else None
        except Exception as exc:
            logger.info("%s %s: an UPDATE's offer refused (488): %s", self.label, self.id, exc)
            return None

    def _dtmf(self, digit: str) -> None:
        logger.debug("%s %s: DTMF %s", self.label, self.id, digit)

    async def _release(self) -> None:
        """The end, after the dialog's last word: the call's tasks (but the one running this), the reply, the RTP."""
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.playout.clear()
        await self.media.close()

    # --- the other side's audio -----------------------------------------------------------------

    def _microphone(self, pcm: bytes) -> None:
        try:
            self._microphone_queue.put_nowait(pcm)
        except asyncio.QueueFull:
            logger.warning("%s %s: microphone backlog full; a frame dropped", self.label, self.id)

    async def _pump_microphone(self) -> None:
        while True:
            pcm = await self._microphone_queue.get()
            if self.core is None or self.core.ended:
                return
            await self.core.receive_audio(pcm)

    async def _watch_media(self) -> None:
        """Hangs up a call whose other side sends no RTP (nor RTCP) for ``S2S_SIP_RTP_TIMEOUT_S``."""
        timeout = self.config.rtp_timeout_s
        while True:
            silent_for = self.media.silent_for()
            if silent_for >= timeout:
                logger.info("%s %s: no RTP for %.0fs; hanging up", self.label, self.id, silent_for)
                await self._no_rtp()
                return
            await asyncio.sleep(timeout - silent_for)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _offer_of(request: SipRequest) -> SdpMessage | None:
    """The SDP offer a request carries, or None; raises what the parser raises for one it cannot read."""
    if request.body and (request.content_type or "").lower().startswith("application/sdp"):
        return parse_sdp(request.text)
    return None
