"""One phone call as a Realtime transport: its SIP dialog (aiosipua), its RTP media, the session behind them.

A call claims its unit when the INVITE arrives, before anything is answered, and its session
starts then (so a ringing call is on the slot board and in the audit). It is answered (200 OK
with the SDP answer) by :meth:`SipCall.accept`: at once with the default session, or when the
operator's ``POST /v1/realtime/calls/{call_id}/accept`` comes. The reply's audio rides RTP, so
the server owns the output buffer, as over WebRTC (``output_audio_buffer.*``, barge-in).
Every end goes through :meth:`SipCall.finish` or the core's ``end``, which calls :meth:`close`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiosipua import IncomingCall, SdpMessage, SipUAC
from aiosipua.dialog import DialogState
from channels.db import database_sync_to_async

from realtime.access import auth
from realtime.access.owner import Caller, Owner, sip_owner
from realtime.live.core import SessionCore, open_session
from realtime.live.opening import OpenRequest
from realtime.live.transport import ControlAnswer, Refusal, ServerEvent
from realtime.models import CallDirection, EndReason, RealtimeSession, TransportKind
from realtime.node import cluster
from realtime.node.runtime import Runtime
from realtime.protocol.close_codes import CLOSE_NORMAL
from realtime.protocol.events import server_event
from realtime.transports.sip import control, uas
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.control import CallStateError
from realtime.transports.sip.leg import CallLeg
from realtime.transports.sip.media import NoCommonCodec, NoPorts

if TYPE_CHECKING:
    from aiortp.port_allocator import PortAllocator

logger = logging.getLogger(__name__)

# SIP statuses for the refusals of the pool: a full pool is busy, a starting or stopping server unavailable.
REFUSAL_STATUS = {"session_limit_reached": 486}
HIDDEN_HEADERS = {"authorization", "proxy-authorization"}  # never sent to the webhook


async def open_call(runtime: Runtime, call: SipCall, request: OpenRequest) -> SessionCore:
    """The one place a SIP call gets its session (raises :class:`Refusal`): the opening every transport shares.
    The listener's gate has let the INVITE in (a trusted address or digest credentials, when either is set;
    docs/deploy.md says what else guards the SIP port); the session's principal is anonymous either way."""
    return await open_session(runtime, call, request)


def number_of(uri: Any) -> str:
    """The user part of a From or To address (a phone number, or a SIP user)."""
    return str(getattr(getattr(uri, "uri", None), "user", "") or "")


class SipCall(CallLeg):
    """One call: ``ringing`` (unit claimed, not answered), ``active`` (answered), ``ended``."""

    def __init__(
        self, incoming: IncomingCall, runtime: Runtime, config: SipConfig, ports: PortAllocator, uac: SipUAC
    ) -> None:
        """``uac``: the user agent client on the transport the INVITE came in on (for REFER)."""
        super().__init__(runtime, config, ports)
        self.incoming = incoming
        self.uac = uac
        self.state = "ringing"
        self.api_key_id: int | None = None  # the key that accepted the call: revoking it ends the call
        self.caller = number_of(incoming.invite.from_addr)
        self.callee = number_of(incoming.invite.to_addr)
        self._answer: SdpMessage | None = None
        self.on_closed: Callable[[SipCall], None] | None = None

    @property
    def sip_call_id(self) -> str:
        return self.incoming.call_id

    @property
    def sip_headers(self) -> list[dict[str, str]]:
        """The INVITE's headers as the webhook carries them (names as sent, order kept, no credentials)."""
        return [
            {"name": name, "value": value}
            for name, values in self.incoming.invite.headers.items()
            if name.lower() not in HIDDEN_HEADERS
            for value in values
        ]

    # --- ringing ------------------------------------------------------------------

    async def ring(self) -> bool:
        """Claims a unit and starts the session, binds the media; False: the INVITE was refused (486, 488, 503)."""
        source_ip, source_port = self.incoming.source_addr
        answerable = bool(self.config.webhook_url)
        request = OpenRequest(
            transport=TransportKind.SIP,
            principal=auth.ANONYMOUS,
            owner=await database_sync_to_async(sip_owner)(self.config.owner_key, answerable),
            model=self.config.session.get("model") or None,
            client_addr=f"{source_ip}:{source_port}"[:100],
            user_agent=self.incoming.invite.get_header("user-agent") or "",
            call_id=self.id,
        )
        try:
            self.core = await open_call(self.runtime, self, request)
        except Refusal as refusal:
            status = REFUSAL_STATUS.get(refusal.code, 503)
            logger.info("SIP call %s from %s refused (%s): %s", self.id, source_ip, status, refusal.code)
            self._decline(status)
            return False
        try:
            if self.incoming.sdp_offer is None:
                raise NoCommonCodec("the INVITE has no SDP offer")
            self._answer = await self.media.open(self.incoming.sdp_offer, source_ip)
        except (NoCommonCodec, NoPorts) as exc:
            status = 488 if isinstance(exc, NoCommonCodec) else 503
            logger.warning("SIP call %s: %s (%s)", self.id, exc, status)
            self._decline(status)
            await self.finish(EndReason.ERROR)
            return False
        except BaseException:
            self._decline(500)
            await self.finish(EndReason.ERROR)
            raise
        if self.media.session is not None and self.media.session.srtp is not None:
            logger.info("SIP call %s: SRTP (%s)", self.id, self.media.session.srtp.offered.suite)
        self._record_numbers()
        return True

    def _record_numbers(self) -> None:
        assert self.core is not None
        session_id = self.core.id
        caller, callee = self.config.recorded_number(self.caller), self.config.recorded_number(self.callee)
        self.runtime.writer.submit(
            lambda: RealtimeSession.objects.filter(id=session_id).update(
                caller=caller, callee=callee, direction=CallDirection.INBOUND
            )
        )

    def ringing(self) -> None:
        self.incoming.ringing()

    # --- the operator's answer ----------------------------------------------------------

    async def accept(self, session: dict[str, Any] | None, by: Caller | None = None) -> None:
        """Answers the call (200 OK with the SDP answer) with these session settings (checked already); ``by``:
        the operator who accepted it (None: the default session answered)."""
        if self.state != "ringing" or self.core is None:
            raise CallStateError(f"The call is {self.state}: only a ringing call can be accepted.")
        self.state = "active"
        if by is not None and by.api_key_id is not None:  # the key that accepted it owns it; revoking it ends it
            self.api_key_id = by.api_key_id
            self.core.change_owner(Owner(by.credential, by.api_key_id))
            await self.core.mailbox.join(cluster.key_group(by.api_key_id))
        elif self.core.owner.answerable:  # accepted by staff: answered, no longer any key's to take
            self.core.change_owner(replace(self.core.owner, answerable=False))
        self.incoming.accept(self._answer)
        if session:
            body = json.dumps({"type": "session.update", "session": session})
            await self.core.receive(body, len(body))
        self._listen()
        logger.info("SIP call %s answered (session %s)", self.id, self.core.id)

    async def reject(self, status: int) -> None:
        if self.state != "ringing":
            raise CallStateError(f"The call is {self.state}: only a ringing call can be rejected.")
        self._decline(status)
        await self.finish(EndReason.SERVER_CLOSED)

    def refer(self, target_uri: str) -> None:
        """Asks the caller's side to call ``target_uri`` (REFER); the call ends when it hangs up on us."""
        if self.state != "active" or self.incoming.dialog.state != DialogState.CONFIRMED:
            raise CallStateError(f"The call is {self.state}: only an answered call can be transferred.")
        self.uac.send_refer(self.incoming.dialog, target_uri, self.incoming.source_addr)

    async def control(self, action: str, body: dict[str, Any], caller: Caller) -> ControlAnswer:
        """The operator's request (``core.Controlled``), from this process or another: :func:`control.run`."""
        return await control.run(self, action, body, caller)

    # --- the end ------------------------------------------------------------------------

    async def finish(self, reason: str) -> None:
        """Ends the session (nothing left to tell the caller but a BYE), then the dialog and the media."""
        if self.core is not None and not self.core.ended:
            await self.core.end(reason, None)
        await self._tear_down()

    def _decline(self, status: int) -> None:
        """The final answer to a ringing INVITE (a 4xx-6xx); nothing more is sent on this call."""
        if self.state == "ringing":
            self.incoming.reject(status)
        self.state = "ended"

    def _accept_reoffer(self, reinvite: IncomingCall, answer: SdpMessage) -> None:
        """The 200 to the caller's re-INVITE (``reinvite`` is the call's own ``incoming``, aiosipua having put the
        re-INVITE in it): sent again until its ACK, whose absence ends the call as the first 200's does."""
        reinvite.accept(answer)

    def caller_left(self, why: str) -> None:
        """BYE, CANCEL or no ACK: the dialog is over on the caller's side; no BYE goes back."""
        logger.info("SIP call %s: %s", self.id, why)
        self.state = "ended"
        self._spawn(self.finish(EndReason.CLIENT_CLOSED), "finish")

    async def _tear_down(self) -> None:
        if self.state == "closed":
            return
        self._decline(503)  # still ringing: the server ended it (shutdown, an admin) before it was answered
        if self.incoming.dialog.state == DialogState.CONFIRMED:
            self.incoming.hangup()  # BYE
        self.state = "closed"
        if self.on_closed is not None:
            self.on_closed(self)
        uas.stop_timers(self.incoming)
        await self._release()

    # --- core.Transport (core.PlaysAudio: PlaysFromQueue, on self.playout) ------------------------

    async def send_event(self, event: ServerEvent) -> None:
        """Nobody on the line reads events: the reply's audio comes through :meth:`play_audio`, and the
        session's events reach the call's followers (``?call_id=``) through the core."""

    async def close(self, code: int, reason: str) -> None:
        """The server ends the call (a hang-up by id, a limit, an admin, a revoked key, shutdown): BYE, or a
        final answer to a call still ringing (603 for a hang-up, else 503)."""
        logger.info("SIP call %s: ended by the server (%s)", self.id, reason)
        self._decline(603 if code == CLOSE_NORMAL else 503)
        await self._tear_down()

    # --- the caller ----------------------------------------------------------------------

    def _dtmf(self, digit: str) -> None:
        """An RFC 4733 key press: ``input_audio_buffer.dtmf_event_received``, as the API sends it."""
        logger.debug("SIP call %s: DTMF %s", self.id, digit)
        event = server_event("input_audio_buffer.dtmf_event_received", event=digit, received_at=int(time.time()))
        if self.core is not None:
            self._spawn(self.core.tell_followers(event), "dtmf")

    async def _no_rtp(self) -> None:
        await self.finish(EndReason.CLIENT_CLOSED)
