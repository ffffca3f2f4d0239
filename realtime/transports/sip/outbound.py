"""Calls the agent places: an INVITE from the SIP listener's user agent client, on a unit claimed first.

``POST /v1/realtime/calls`` with ``{"sip": {...}}`` (:mod:`realtime.transports.sip.outbound_views`) makes an
:class:`OutboundCall`: its session opens at once (a claimed unit, owned by the API key that asked, in
``Runtime.calls`` so the sideband ``/v1/realtime?call_id=`` follows it from the first moment), then the INVITE
goes to ``S2S_SIP_OUTBOUND_PROXY`` or the target's host, with digest credentials for a trunk's challenge. The
call is ``dialing``, ``ringing`` (a 180/183), ``answered`` (a 200 OK: RTP both ways, a ``response.create``
sent before plays now), or it ends ``busy``, ``no_answer`` (the ring timeout: CANCEL), ``rejected``,
``failed`` or ``ended`` (a hang-up: CANCEL while it rings, BYE once answered; the callee's BYE; no RTP).
However it ends, the unit goes back and the :class:`CallRecord` says why; each change of status goes to the
audit (the session's row: direction, numbers, status, end reason, SIP code) and, where ``S2S_SIP_WEBHOOK_URL`` is
set, to the webhook (``realtime.call.status_changed``, signed as ``realtime.call.incoming`` is). :class:`Dialler`
keeps the records of this process's outbound calls (``GET /v1/realtime/calls/{id}``) and ACKs every non-2xx final
answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiosipua import IncomingCall, OutgoingCall, SdpMessage, SipRequest, SipResponse, SipUAC, parse_address
from aiosipua.auth import SipDigestAuth
from aiosipua.dialog import DialogState

from realtime.access.owner import Owner
from realtime.access.rate import RateTable
from realtime.live.core import open_session
from realtime.live.opening import OpenRequest
from realtime.live.transport import ServerEvent
from realtime.models import CallDirection, EndReason, RealtimeSession
from realtime.node.runtime import Runtime
from realtime.transports.sip import webhook
from realtime.transports.sip.config import SipConfig, within
from realtime.transports.sip.dialling import Target, status_of, user_of
from realtime.transports.sip.dialogs import NO_DIALOG, Action, Match, refusal, tags
from realtime.transports.sip.leg import CallLeg
from realtime.transports.sip.media import NoCommonCodec
from realtime.transports.sip.uas import branch_of, stop_timers

if TYPE_CHECKING:
    from aiortp.port_allocator import PortAllocator

logger = logging.getLogger(__name__)

USER_AGENT = "s2s-realtime"
MAX_RECORDS = 1000  # the records of ended calls this process keeps (the oldest go first)
MAX_ENDED_DIALOGS = 256  # ended calls whose late final answers (a 487 after our CANCEL) are still ACKed
LINGER_S = 5.0  # an outbound TCP or TLS connection stays open this long after its last call (the BYE's 200, a 487)


@dataclass
class CallRecord:
    """What ``GET /v1/realtime/calls/{id}`` tells the call's owner; kept after the call ended."""

    id: str
    to: str
    owner: Owner
    transport: str = "udp"  # how the INVITE went: udp, tcp, tls
    session_id: str = ""
    status: str = "dialing"
    created_at: int = field(default_factory=lambda: int(time.time()))
    ringing_at: int | None = None
    answered_at: int | None = None
    ended_at: int | None = None
    sip_code: int | None = None  # the final answer to the INVITE (200, 486, ...), None before one
    end_reason: str | None = None

    @property
    def live(self) -> bool:
        return self.ended_at is None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.call",
            "status": self.status,
            "direction": "outbound",
            "to": self.to,
            "transport": self.transport,
            "session_id": self.session_id,
            "created_at": self.created_at,
            "ringing_at": self.ringing_at,
            "answered_at": self.answered_at,
            "ended_at": self.ended_at,
            "sip_code": self.sip_code,
            "end_reason": self.end_reason,
        }


class Dialler:
    """This process's outbound calls: live ones by SIP Call-ID, records by id, the per-key caps."""

    def __init__(self, config: SipConfig, ports: PortAllocator) -> None:
        self.config = config
        self.ports = ports
        self.uacs: dict[str, SipUAC] = {}  # the agents' clients by transport (udp, tcp, tls), once the listener started
        self.records: OrderedDict[str, CallRecord] = OrderedDict()
        self._calls: dict[str, OutboundCall] = {}
        self._ended: OrderedDict[str, OutboundCall] = OrderedDict()  # by Call-ID: still ACKed, nothing else
        per_minute = config.outbound_per_minute
        self.per_minute = RateTable(per_minute / 60.0, per_minute)
        self._deliveries: dict[str, asyncio.Task[None]] = {}  # by call id: the last status change still being posted

    def record(self, call_id: str) -> CallRecord | None:
        return self.records.get(call_id)

    def live_calls_of(self, api_key_id: int | None) -> int:
        return sum(1 for record in self.records.values() if record.live and record.owner.api_key_id == api_key_id)

    def limited(self, api_key_id: int | None) -> str | None:
        """Why ``api_key_id`` may not place another call now (its calls at once, then a minute), or None."""
        at_once = self.config.outbound_per_key
        if at_once and self.live_calls_of(api_key_id) >= at_once:
            return f"This key holds {at_once} outbound calls already (S2S_SIP_OUTBOUND_PER_KEY)."
        if self.per_minute.take(str(api_key_id)) > 0:
            return f"This key placed {self.config.outbound_per_minute} calls this minute (S2S_SIP_OUTBOUND_PER_MINUTE)."
        return None

    def add(self, call: OutboundCall) -> None:
        self.records[call.id] = call.record
        while len(self.records) > MAX_RECORDS:
            oldest = next((key for key, record in self.records.items() if not record.live), None)
            if oldest is None:
                break
            del self.records[oldest]

    def placed(self, call: OutboundCall) -> None:
        self._calls[call.sip_call_id] = call

    def forget(self, call: OutboundCall) -> None:
        if self._calls.get(call.sip_call_id) is call:
            del self._calls[call.sip_call_id]
            self._ended[call.sip_call_id] = call
            while len(self._ended) > MAX_ENDED_DIALOGS:
                self._ended.popitem(last=False)
        if call.uac is not None:
            call.uac.remove_call(call.sip_call_id)
            if call.transport != "udp":  # our connection to the callee or trunk, a while after its last call
                asyncio.get_running_loop().call_later(LINGER_S, self._disconnect, call.uac, call.remote_addr)

    def _disconnect(self, uac: SipUAC, remote_addr: tuple[str, int]) -> None:
        """Closes our connection to ``remote_addr`` unless a call of ours is on it again."""
        if any(other.uac is uac and other.remote_addr == remote_addr for other in self._calls.values()):
            return
        disconnect = getattr(uac.transport, "disconnect", None)
        if disconnect is not None:
            disconnect(remote_addr)

    def response(self, response: SipResponse, addr: tuple[str, int]) -> None:
        """Every non-2xx final answer to one of our INVITEs is ACKed (RFC 3261 s17.1.1.3; aiosipua does not),
        retransmissions included; a 200 OK is aiosipua's to ACK."""
        call = self._calls.get(response.call_id or "") or self._ended.get(response.call_id or "")
        cseq = response.cseq
        if call is None or cseq is None or cseq.method.upper() != "INVITE" or response.status_code < 200:
            return
        if response.status_code < 300:
            call.answered_from(response)
            return
        ack = SipRequest(method="ACK", uri=call.outgoing.invite.uri if call.outgoing else call.target.to)
        via = response.headers.get_first("via")
        if via:
            ack.headers.append("Via", via)
        for name, header in (("from", "From"), ("to", "To"), ("call-id", "Call-ID")):
            value = response.headers.get_first(name)
            if value:
                ack.headers.set_single(header, value)
        ack.headers.set_single("CSeq", f"{cseq.seq} ACK")
        ack.headers.set_single("Max-Forwards", "70")
        ack.headers.set_single("Content-Length", "0")
        if call.uac is not None:
            call.uac.transport.send(ack, call.remote_addr)

    def match(self, request: SipRequest, addr: tuple[str, int], transport: Any) -> Match | None:
        """Whether an in-dialog request (BYE, re-INVITE, UPDATE, ACK, ...) belongs to one of our calls' dialogs
        (RFC 3261 s12.2.2): its ``Call-ID``, both tags, a host the call speaks with (:meth:`OutboundCall.peer`), on
        the transport the call went out on (the one whose agent holds its dialog: on another, aiosipua would take a
        re-INVITE for a new call); anything else naming our call is 481 (an ``ACK``, dropped), the call untouched.
        None: not our call's (the listener's :class:`~realtime.transports.sip.dialogs.CallTable` decides)."""
        call = self._calls.get(request.call_id or "")
        method = request.method.upper()
        from_tag, to_tag = tags(request)
        if call is None or call.outgoing is None or method == "CANCEL" or (method == "INVITE" and not to_tag):
            return None
        dialog = call.outgoing.dialog
        ours = (from_tag, to_tag) == (dialog.remote_tag, dialog.local_tag) and call.peer(str(addr[0]))
        if not ours or call.uac is None or call.uac.transport is not transport:
            return Match(Action.DROP) if method == "ACK" else NO_DIALOG
        if method in ("INVITE", "UPDATE") and call.record.status != "answered":
            return refusal(491, "a re-INVITE before the call was answered")
        if method == "ACK":
            call.acked()
        return Match(Action.PASS)

    def live(self, sip_call_id: str) -> OutboundCall | None:
        return self._calls.get(sip_call_id)

    def hung_up(self, sip_call_id: str) -> bool:
        """The callee's BYE (aiosipua answered it 200): True if it was one of our calls."""
        call = self._calls.get(sip_call_id)
        if call is None:
            return False
        call.ended_by_callee("callee_hung_up")
        return True

    def announce(self, record: CallRecord) -> None:
        """Posts the record's new status to the webhook, where one is set: each call's changes in order (a change
        waits for the one before), none holding up the call (each delivery bounded: ``webhook.deliver``)."""
        if not self.config.webhook_url:
            return
        event = webhook.status_event(record.as_json())
        previous = self._deliveries.get(record.id)
        task = asyncio.create_task(self._deliver(previous, event, record.id), name=f"webhook-{record.id}")
        self._deliveries[record.id] = task
        task.add_done_callback(lambda done: self._delivered(record.id, done))

    async def _deliver(self, previous: asyncio.Task[None] | None, event: dict[str, Any], call_id: str) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await webhook.deliver(self.config, event, f"SIP outbound call {call_id}")

    def _delivered(self, call_id: str, task: asyncio.Task[None]) -> None:
        if self._deliveries.get(call_id) is task:
            del self._deliveries[call_id]

    async def stop(self) -> None:
        for call in list(self._calls.values()):
            await call.finish(EndReason.SERVER_CLOSED, "ended", "server_closed")
        if self._deliveries:  # the last status changes, bounded (two attempts of DELIVERY_TIMEOUT_S each)
            await asyncio.wait(list(self._deliveries.values()), timeout=webhook.ATTEMPTS * webhook.DELIVERY_TIMEOUT_S)


class OutboundCall(CallLeg):
    """One call the agent places: a Realtime transport (the reply on RTP) over an aiosipua ``OutgoingCall``."""

    label = "SIP outbound call"

    def __init__(
        self,
        dialler: Dialler,
        runtime: Runtime,
        target: Target,
        remote_addr: tuple[str, int],
        owner: Owner,
        transport: str = "udp",
    ) -> None:
        """``remote_addr``: where the INVITE goes (the trunk, or the target's host), over ``transport``."""
        super().__init__(runtime, dialler.config, dialler.ports)
        self.dialler = dialler
        self.target = target
        self.remote_addr = remote_addr
        self.record = CallRecord(self.id, target.to, owner, transport)
        self.outgoing: OutgoingCall | None = None
        self.transport = transport
        self.uac: SipUAC | None = None  # the client of the listener's agent on that transport
        self.contact_host = ""  # the host of the 200 OK's Contact: the callee's in-dialog requests may come from it
        self.reinvite: IncomingCall | None = None  # the callee's last re-INVITE we answered 200, until its ACK
        self._closed = False

    @property
    def sip_call_id(self) -> str:
        return self.outgoing.call_id if self.outgoing is not None else ""

    @property
    def client_addr(self) -> str:
        return f"{self.remote_addr[0]}:{self.remote_addr[1]}"

    def peer(self, host: str) -> bool:
        """Whether an in-dialog request from ``host`` may act on the call: the host the INVITE went to (the target or
        ``S2S_SIP_OUTBOUND_PROXY``), the 200 OK's Contact host, or an ``S2S_SIP_TRUSTED`` address (the trunk's)."""
        return host in (self.remote_addr[0], self.contact_host) or within(host, self.config.trusted)

    def answered_from(self, response: SipResponse) -> None:
        """A 2xx to our INVITE: its Contact's host is the callee's (its BYE or re-INVITE may come from there)."""
        contact = response.headers.get_first("contact")
        if contact and not self.contact_host:
            try:
                self.contact_host = str(parse_address(contact).uri.host or "").strip("[]")
            except Exception:  # a Contact that cannot be read names no host
                self.contact_host = ""

    # --- placing the call -----------------------------------------------------------------

    async def dial(self, request: OpenRequest) -> None:
        """Opens the session (raises ``Refusal``: nothing dialled), then sends the INVITE."""
        self.core = await open_session(self.runtime, self, request)
        self.record.session_id = self.core.id
        self.dialler.add(self)
        from_uri = self.target.from_uri or self.config.outbound_from or f"sip:s2s@{self.config.sdp_ip}"
        caller, callee = (self.config.recorded_number(user_of(uri)) for uri in (from_uri, self.target.to))
        self._audit(direction=CallDirection.OUTBOUND, caller=caller, callee=callee)
        self._changed()
        try:
            # SRTP (SDES) over TLS, as S2S_SIP_SRTP allows it; over UDP or TCP only where it is required.
            srtp = self.config.srtp == "required" or (self.transport == "tls" and self.config.srtp != "off")
            offer = await self.media.offer(srtp=srtp)
            uac = self.uac = self.dialler.uacs.get(self.transport)
            if uac is None:
                raise RuntimeError(f"the SIP listener has no {self.transport} agent")
            connect = getattr(uac.transport, "connect", None)
            if self.transport != "udp" and connect is not None:
                proxy = self.config.outbound_proxy
                await connect(self.remote_addr, proxy[0] if proxy else self.target.host_port[0])
            credentials = None
            if self.config.outbound_user:
                credentials = SipDigestAuth(self.config.outbound_user, self.config.outbound_password)
            self.outgoing = uac.send_invite(
                from_uri,
                self.target.to,
                self.remote_addr,
                offer,
                extra_headers=self.target.headers or None,
                user_agent=USER_AGENT,
                auth=credentials,
            )
        except Exception as exc:  # OSError: no connection (refused, timed out, a certificate not trusted)
            logger.warning("SIP outbound call %s: could not be placed: %s", self.id, exc)
            await self.finish(EndReason.ERROR, "failed", "unreachable" if isinstance(exc, OSError) else "failed")
            return
        self.outgoing.on_ringing = lambda _call: self._ringing()
        self.outgoing.on_answer = lambda _call: self._spawn(self._answered(), "answered")
        self.outgoing.on_rejected = lambda _call, code, reason: self._rejected(code, reason)
        self.dialler.placed(self)
        self._spawn(self._ring_timeout(), "ring-timeout")
        logger.info("SIP outbound call %s: INVITE sent (session %s, branch %s)", self.id, self.core.id, self._branch())

    async def speak_first(self) -> None:
        """A ``response.create`` into the session now: the agent's first words play as soon as the callee answers."""
        if self.core is not None and not self.core.ended and self.record.live:
            body = json.dumps({"type": "response.create"})
            await self.core.receive(body, len(body))

    def _branch(self) -> str:
        return branch_of(self.outgoing.invite) if self.outgoing is not None else ""

    def _ringing(self) -> None:
        if self.record.status == "dialing":
            self.record.status = "ringing"
            self.record.ringing_at = int(time.time())
            self._changed()

    async def _answered(self) -> None:
        """A 200 OK (aiosipua ACKed it): RTP to the address its SDP names, the reply's clock, the microphone."""
        if self._closed or self.outgoing is None or self.core is None:
            return
        self.record.sip_code = 200
        try:
            if self.outgoing.sdp_answer is None:
                raise NoCommonCodec("the 200 OK has no SDP answer")
            await self.media.answered(self.outgoing.sdp_answer, self.remote_addr[0])
        except Exception as exc:  # an answer without usable G.711, or RTP that cannot be bound: BYE, failed
            logger.warning("SIP outbound call %s: %s; hanging up", self.id, exc)
            await self.finish(EndReason.ERROR, "failed", "bad_answer")
            return
        self.record.status = "answered"
        self.record.answered_at = int(time.time())
        self._changed()
        self._listen()
        logger.info("SIP outbound call %s answered", self.id)

    def _rejected(self, code: int, reason: str) -> None:
        status = status_of(code)
        logger.info("SIP outbound call %s: %s %s (%s)", self.id, code, reason[:80], status)
        self.record.sip_code = code
        self._spawn(self.finish(EndReason.CLIENT_CLOSED, status, f"sip_{code}"), "finish")

    async def _ring_timeout(self) -> None:
        await asyncio.sleep(self.config.ring_timeout_s)
        if self.record.status in ("dialing", "ringing"):
            logger.info("SIP outbound call %s: not answered in %.0fs; cancelled", self.id, self.config.ring_timeout_s)
            await self.finish(EndReason.SERVER_CLOSED, "no_answer", "ring_timeout")

    def _accept_reoffer(self, reinvite: IncomingCall, answer: SdpMessage) -> None:
        """The 200 to the callee's re-INVITE, sent again until its ACK over UDP (RFC 3261 s13.3.1.4: the ACK comes
        through :meth:`Dialler.match`); without one in time the call ends as an inbound call does."""
        self.acked()
        reinvite.retransmit_2xx = not getattr(reinvite.transport, "reliable", True)
        reinvite.on_ack_timeout = lambda _call: self._spawn(self.finish(EndReason.ERROR, "ended", "no_ack"), "finish")
        self.reinvite = reinvite
        reinvite.accept(answer)

    def acked(self) -> None:
        """The callee's ACK of our 200 to its re-INVITE: that 200 is no longer sent again."""
        if self.reinvite is not None:
            stop_timers(self.reinvite)
            self.reinvite = None

    def ended_by_callee(self, why: str) -> None:
        self._spawn(self.finish(EndReason.CLIENT_CLOSED, "ended", why), "finish")

    # --- the end --------------------------------------------------------------------------

    async def finish(self, reason: str, status: str, why: str) -> None:
        """Ends the call as ``status`` for ``why``: the session first (the unit back), then the dialog, the media."""
        self._ended(status, why)
        if self.core is not None and not self.core.ended:
            await self.core.end(reason, None)
        await self._tear_down()

    def _ended(self, status: str, why: str) -> None:
        if self.record.live:
            self.record.status, self.record.end_reason = status, why
            self.record.ended_at = int(time.time())
            self._changed()

    def _changed(self) -> None:
        """The record's status changed: the audit keeps it, the webhook (``S2S_SIP_WEBHOOK_URL``) hears it."""
        record = self.record
        self._audit(call_status=record.status, call_end_reason=record.end_reason or "", sip_code=record.sip_code)
        self.dialler.announce(record)

    def _audit(self, **fields: Any) -> None:
        """Writes ``fields`` to the session's row in the audit (after the row the opening wrote: one writer)."""
        if self.core is not None:
            session_id = self.core.id
            self.runtime.writer.submit(lambda: RealtimeSession.objects.filter(id=session_id).update(**fields))

    async def _tear_down(self) -> None:
        """CANCEL a call still ringing, BYE an answered one (unless the callee ended it), free the RTP ports."""
        if self._closed:
            return
        self._closed = True
        uac, outgoing = self.uac, self.outgoing
        if uac is not None and outgoing is not None:
            try:
                if outgoing.dialog.state == DialogState.EARLY:
                    uac.send_cancel(outgoing)
                elif outgoing.dialog.state == DialogState.CONFIRMED and self.record.end_reason != "callee_hung_up":
                    uac.send_bye(outgoing.dialog, self.remote_addr)
            except Exception:
                logger.exception("SIP outbound call %s: the CANCEL or BYE could not be sent", self.id)
        self.acked()
        await self._release()
        self.dialler.forget(self)

    # --- core.Transport ----------------------------------------------------------------------

    async def send_event(self, event: ServerEvent) -> None:
        """Nobody on the line reads events: the followers (``?call_id=``) get them through the core."""

    async def close(self, code: int, reason: str) -> None:
        """The server ends the call (a hang-up by id, a limit, an admin, a revoked key, shutdown)."""
        logger.info("SIP outbound call %s: ended by the server (%s)", self.id, reason)
        self._ended("ended", "cancelled" if self.record.status in ("dialing", "ringing") else "hung_up")
        await self._tear_down()

    async def _no_rtp(self) -> None:
        await self.finish(EndReason.CLIENT_CLOSED, "ended", "no_rtp")
