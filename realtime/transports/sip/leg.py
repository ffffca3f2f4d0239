"""What a call the server answers (:class:`~realtime.transports.sip.call.SipCall`) and a call it places
(:class:`~realtime.transports.sip.outbound.OutboundCall`) share once the dialog is up: the reply's queue and the
RTP media, the other side's audio pumped into the session, the watch that hangs up when its RTP stops, the
call's tasks, and the one release of all of them at the end (:meth:`CallLeg._release`).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from pipelines.ids import new_id
from realtime.live.core import SessionCore
from realtime.node.runtime import Runtime
from realtime.transports.playout import PlaysFromQueue, ReplyQueue
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.media import FRAME_SAMPLES, RATE, CallMedia

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

    def _listen(self) -> None:
        """The call is up: the reply's clock starts, the other side's audio goes to the session, RTP is watched."""
        self.media.start_playout()
        self._spawn(self._pump_microphone(), "microphone")
        self._spawn(self._watch_media(), "rtp-watch")

    @abstractmethod
    async def _no_rtp(self) -> None:
        """The other side sent no RTP (nor RTCP) for ``S2S_SIP_RTP_TIMEOUT_S``: ends the call (as each kind of
        call ends: an answered call with a BYE and its record's reason, a placed one with its status)."""

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
