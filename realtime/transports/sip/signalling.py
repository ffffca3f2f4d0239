"""The SIP listener of this process: aiosipua's user agent server on UDP, TCP and TLS, one :class:`SipCall` per INVITE.

aiosipua parses and answers SIP (RFC 3261: transactions, dialogs, 100 Trying, 2xx
retransmission until the ACK, 400 for a request missing a mandatory header, 405 for an
unknown method, 481 for a request of no dialog); this module decides what reaches it and
what an INVITE becomes: a claimed unit and a ringing call, or ``486 Busy Here`` when the
pool is full. Every request is screened before aiosipua sees it: it may act only on the
call it belongs to (:mod:`realtime.transports.sip.dialogs`: a CANCEL by its transaction, a
BYE by both tags and the caller's host), and a new INVITE passes the gate before any state
exists, known Call-ID or not: a trusted source or valid digest credentials
(:mod:`realtime.transports.sip.auth`, else ``401``/``403``), an offer whose audio can be
sent to and the SRTP policy takes (else ``488``), a Call-ID no call holds (else ``482``) and
room in the bounded table of calls (else ``503``). A refused request is answered without a
dialog and leaves nothing behind. The listener lives on the server's event loop, started and
stopped by :class:`realtime.node.runtime.Runtime` like the process's other parts.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from aiortp.port_allocator import PortAllocator
from aiosipua import IncomingCall, SdpMessage, SipRequest, SipResponse, SipUAS, parse_sdp
from aiosipua.transport import SipTransport, TcpSipTransport
from django.conf import settings

from realtime.node.runtime import Runtime
from realtime.transports.sip import guard, uas
from realtime.transports.sip.auth import DigestAuth
from realtime.transports.sip.call import SipCall
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.dialogs import Action, CallTable, Match, refusal
from realtime.transports.sip.outbound import Dialler
from realtime.transports.sip.sockets import (
    TRANSPORT_NAMES,
    TcpBounds,
    TcpTransport,
    TlsTransport,
    UdpTransport,
    client_tls_context,
    server_tls_context,
)
from realtime.transports.sip.srtp import Unacceptable, choose
from realtime.transports.sip.webhook import announce

logger = logging.getLogger(__name__)

USER_AGENT = "s2s-realtime"
WATCH_INTERVAL_S = 1.0  # how often the listener checks that its sockets are open


def listeners() -> list[SipListener]:
    """The SIP listener the settings ask for (``S2S_SIP_BIND``), or none."""
    return [SipListener(settings.S2S_SIP)] if settings.S2S_SIP.enabled else []


class SipListener:
    """Answers INVITEs on ``config.host:config.port`` over UDP and TCP, and ``config.tls_*`` over TLS."""

    def __init__(self, config: SipConfig) -> None:
        self.config = config
        self.ports = PortAllocator(config.rtp_ports)
        self.auth = DigestAuth(config.users, config.trusted, config.realm, config.digest_algorithms)
        self.refused = 0  # requests refused before aiosipua saw them (the gate, no such dialog, a duplicate, full)
        self.runtime: Runtime | None = None
        self._agents: list[SipUAS] = []
        self._calls = CallTable(config.max_calls_per_address, config.max_calls)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.dropped = 0  # messages aiosipua parsed but could not handle
        self.bad_requests = 0  # requests answered 400 (an impossible Via or Contact, an empty Call-ID)
        self._refusals = guard.RefusalLog("SIP")
        self.restarts = 0  # transports started again after their socket closed
        self._watchdog: asyncio.Task[None] | None = None
        self.dialler = Dialler(config, self.ports)  # the calls the agent places (realtime.transports.sip.outbound)

    @property
    def calls(self) -> dict[str, SipCall]:
        return {call.sip_call_id: call for call in self._calls}

    @property
    def held(self) -> tuple[int, int]:
        """What aiosipua holds: calls (one table, which its agents share) and INVITE server transactions (one table
        per agent); refused requests must grow neither."""
        counts = [uas.held(agent) for agent in self._agents]
        return (counts[0][0] if counts else 0), sum(transactions for _, transactions in counts)

    async def start(self, runtime: Runtime) -> None:
        self.runtime = runtime
        address = (self.config.host, self.config.port)
        advertised = (self.config.sdp_ip, self.config.port)
        bounds: TcpBounds = {
            "idle_timeout_s": self.config.tcp_idle_s,
            "max_per_address": self.config.tcp_max_per_address,
            "max_total": self.config.tcp_max_connections,
            "carries_call": self._carries_call,
        }
        transports: list[tuple[SipTransport, tuple[str, int]]] = [
            (UdpTransport(local_addr=address), advertised),
            (TcpTransport(local_addr=address, **bounds), advertised),
        ]
        if self.config.tls_host:
            tls_address = (self.config.tls_host, self.config.tls_port)
            context, client = server_tls_context(self.config), client_tls_context(self.config)
            tls = TlsTransport(local_addr=tls_address, ssl_context=context, client_context=client, **bounds)
            transports.append((tls, self.config.tls_contact))
        for transport, advertised in transports:
            agent = uas.make_agent(transport, advertised, USER_AGENT, self._agents[0] if self._agents else None)
            agent.on_invite = self._on_invite
            agent.on_bye = lambda incoming, _request: self._ended_by_caller(incoming, "the caller hung up (BYE)")
            agent.on_cancel = lambda request, _addr: self._cancelled(request)
            agent.on_ack_timeout = lambda incoming: self._ended_by_caller(incoming, "no ACK for the 200 OK")
            agent.on_transfer_progress = self._transfer_progress
            agent.on_reinvite = self._reinvited
            agent.on_update = self._updated
            await agent.start()
            transport.on_message = partial(self._guarded, transport, transport.on_message)
            self._agents.append(agent)
        # Outbound calls go out by the agent of their transport (UDP, TCP, TLS where it listens).
        self.dialler.uacs = dict(zip(("udp", "tcp", "tls"), (agent.uac for agent in self._agents), strict=False))
        self._watchdog = asyncio.create_task(self._watch(), name="sip-watchdog")
        logger.info("SIP listening on %s:%s (UDP and TCP), RTP on %s-%s", *address, *self.config.rtp_ports)
        if self.config.tls_host:
            logger.info("SIP over TLS listening on %s:%s", self.config.tls_host, self.config.tls_port)
        if not self.auth.enabled:
            logger.warning(
                "SIP: S2S_SIP_USERS and S2S_SIP_TRUSTED are unset: anyone who reaches the SIP port can call "
                "(firewall it to the trunk's addresses)"
            )

    async def stop(self) -> None:
        """Closes the sockets (the runtime's drain has ended the calls already)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        for call in list(self._calls):
            await call.finish("server_closed")
        await self.dialler.stop()
        for agent in self._agents:
            await agent.stop()
        self._agents.clear()
        for task in list(self._tasks):
            task.cancel()

    def _carries_call(self, transport: TcpSipTransport, addr: tuple[str, int]) -> bool:
        """Whether a connection carries a live call (it is not closed for idling)."""
        return any(
            call.incoming.transport is transport and tuple(call.incoming.source_addr) == addr for call in self._calls
        )

    @property
    def up(self) -> bool:
        """Whether every transport of the listener is listening (``/readyz`` and the metrics say so)."""
        return all(getattr(agent.transport, "alive", True) for agent in self._agents)

    async def _watch(self) -> None:
        """Starts again any transport whose socket closed (nothing should close it; if something does, the phone
        line must not stay dead until a restart), and tells the metrics each transport's state and what aiosipua
        holds (``s2s_sip_held``: calls and INVITE server transactions, which a flood must not grow)."""
        while True:
            if self.runtime is not None:
                self.runtime.metrics.sip_state(*self.held)
            for agent in self._agents:
                transport, name = agent.transport, TRANSPORT_NAMES.get(type(agent.transport), "other")
                alive = getattr(transport, "alive", True)
                if self.runtime is not None:
                    self.runtime.metrics.listener_state(name, alive)
                if alive:
                    continue
                self.restarts += 1
                if self.runtime is not None:
                    self.runtime.metrics.count_listener_restart(name)
                logger.error("SIP: the %s listener on %s:%s was closed; starting it again", name, *transport.local_addr)
                try:
                    await transport.restart()
                except Exception:
                    logger.exception("SIP: the %s listener could not be started again", name)
            await asyncio.sleep(WATCH_INTERVAL_S)

    # --- requests, before aiosipua sees them ----------------------------------------------

    def _guarded(self, transport: SipTransport, dispatch: Any, message: Any, addr: tuple[str, int]) -> None:
        """aiosipua's handling of one message, once :meth:`_screened` lets it through; one that breaks aiosipua
        (a CSeq it cannot read) is dropped with a line counted, not a traceback for each of a flood."""
        try:
            if isinstance(message, SipRequest) and not self._screened(transport, message, addr):
                return
            if isinstance(message, SipResponse):
                self.dialler.response(message, addr)
            dispatch(message, addr)
        except Exception as exc:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning(
                    "SIP message from %s:%s dropped (%s: %s); %s so far", *addr, type(exc).__name__, exc, self.dropped
                )

    def _screened(self, transport: SipTransport, request: SipRequest, addr: tuple[str, int]) -> bool:
        """Whether aiosipua may handle ``request``; if not, it was answered here (or dropped), statelessly.

        A request that cannot be answered as it says (an impossible ``Via`` or ``Contact`` port, an empty
        ``Call-ID``) gets 400; one that names a call it does not belong to 481 (:class:`CallTable`); a new
        INVITE goes through the gate, then must not repeat a held call's ``Call-ID`` (482) and must find room
        (503). Nothing is created for a refused one."""
        if request.method != "ACK":
            problem = guard.request_problem(request)
            if problem is not None:
                self.bad_requests += 1
                self._refuse(transport, request, addr, 400, problem)
                return False
        found = self.dialler.match(request, addr, transport) or self._calls.match(request, addr, transport)
        if found.action is Action.RETRANSMISSION:  # the 100 again while it rings; a 200 is retransmitted anyway
            if found.call is not None and found.call.state == "ringing":
                found.call.incoming.trying()
            return False
        if found.action is Action.NEW:
            try:
                found = self._gate(request, addr) or found
            except Exception:  # a gate that breaks must still answer, and leave nothing behind
                logger.exception("SIP INVITE %s: the gate failed", (request.call_id or "")[:100])
                found = refusal(500, "the gate failed")
        if found.action is Action.NEW and found.call is not None:  # a held call's Call-ID (RFC 3261 s8.2.2.2)
            found = refusal(482, "another transaction with a held call's Call-ID")
        if found.action is Action.NEW and (full := self._calls.full_for(str(addr[0]))) is not None:
            found = refusal(503, f"Service Unavailable ({full})", (("Retry-After", "5"),))
        if found.action is Action.REFUSE:
            self._refuse(transport, request, addr, found.status, found.reason, found.headers)
        if found.action is Action.PASS and request.method == "INVITE":  # in-dialog: the owner check passed
            leg = self._calls.get(request.call_id or "") or self.dialler.live(request.call_id or "")
            if leg is not None and leg.repeated(request):
                return False
        return found.action in (Action.PASS, Action.NEW)

    def _gate(self, request: SipRequest, addr: tuple[str, int]) -> Match | None:
        """Who may ring, before anything exists: credentials (401 challenge, 403), then an offer that can be read
        (400) and sent to (488), then the SRTP policy (488). None: let in."""
        source_ip = str(addr[0])
        verdict = self.auth.check(source_ip, "INVITE", request.headers.get("authorization"))
        if not verdict.admitted:
            challenge = self.auth.challenge(stale=verdict.stale) if verdict.status == 401 else []
            return refusal(verdict.status, verdict.reason, tuple(("WWW-Authenticate", value) for value in challenge))
        offer: SdpMessage | None = None
        if request.body and request.content_type == "application/sdp":
            try:
                offer = parse_sdp(request.text)
            except Exception:
                return refusal(400, "Malformed SDP")
        problem = guard.offer_problem(offer, self.config.media_family, source_ip)
        if problem is not None:
            return refusal(488, problem)
        if offer is not None and offer.audio is not None:
            try:
                choose(offer.audio.proto, offer.audio.attributes.get("crypto", []), self.config.srtp)
            except Unacceptable as exc:
                return refusal(488, str(exc))
        if verdict.user:
            logger.info("SIP INVITE %s from %s: authenticated as %r", request.call_id, source_ip, verdict.user)
        return None

    def _refuse(
        self,
        transport: SipTransport,
        request: SipRequest,
        addr: tuple[str, int],
        status: int,
        why: str,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """A final answer to a request that never reached aiosipua, sent back where it came from; logged a line
        per peer and status a minute (:class:`guard.RefusalLog`), so a flood of them costs no disk."""
        self.refused += 1
        self._refusals.refused(str(addr[0]), status, why, f"SIP {request.method[:20]}")
        uas.answer(transport, request, addr, status, _REASONS.get(status, why), USER_AGENT, headers)

    # --- calls ------------------------------------------------------------------------------

    def _on_invite(self, incoming: IncomingCall) -> None:
        """aiosipua made a dialog of an INVITE :meth:`_screened` let in: it becomes a call, in the table at once
        (no ``await`` since the screen, so its bounds still hold)."""
        assert self.runtime is not None
        agent = self._agent_of(incoming)
        assert agent.uac is not None
        call = SipCall(incoming, self.runtime, self.config, self.ports, agent.uac)
        call.on_closed = self.forget
        self._calls.add(call, uas.branch_of(incoming.invite))
        self._spawn(self._answer(call), f"invite-{call.id}")

    async def _answer(self, call: SipCall) -> None:
        """Claims and rings; then the default session answers, or the webhook is told and the operator does."""
        try:
            if not await call.ring():
                return
            if not self.config.webhook_url:
                await call.accept(self.config.session or None)
                return
            call.ringing()
            security = "srtp" if call.media.encrypted else "rtp"
            if not await announce(self.config, call.id, call.sip_headers, security):
                await call.reject(503)
                return
            await asyncio.sleep(self.config.accept_timeout_s)
            if call.state == "ringing":
                logger.info("SIP call %s: not accepted in %.0fs; declined (480)", call.id, self.config.accept_timeout_s)
                await call.reject(480)
        except Exception:
            if call.state in ("ended", "closed"):  # the caller cancelled (or hung up) while it was being answered
                logger.info("SIP call %s: the caller left while it was being answered", call.id)
            else:
                logger.exception("SIP call %s: could not be answered", call.id)
                await call.finish("error")
        finally:
            if call.state == "ended":  # refused before it rang
                self.forget(call)

    def _cancelled(self, request: SipRequest) -> None:
        """aiosipua answered a CANCEL (200, and 487 to the INVITE): the call of the INVITE transaction it matched,
        which :meth:`_screened` checked is the CANCEL's own, ends; never a call the CANCEL merely names."""
        call = self._calls.of_branch(uas.branch_of(request))
        if call is not None and call.sip_call_id == request.call_id:
            self._caller_left(call, "the caller cancelled")

    def _ended_by_caller(self, incoming: IncomingCall, why: str) -> None:
        """A BYE or a missing ACK on ``incoming``'s dialog: its call ends (if it is still the one held); a BYE on
        an outbound call's dialog ends that call."""
        if self.dialler.hung_up(incoming.call_id):
            return
        call = self._calls.get(incoming.call_id)
        if call is not None and call.incoming is incoming:
            self._caller_left(call, why)

    def _reinvited(self, incoming: IncomingCall) -> None:
        """A re-INVITE :meth:`_screened` let through (its Call-ID, both tags, the other side's host), on an answered
        call or a placed one (aiosipua then wraps the request in an ``IncomingCall`` of its own): the call answers
        it (:meth:`CallLeg.reoffered`: 200 with its SDP, or 488)."""
        call = self._calls.get(incoming.call_id)
        if call is not None and call.incoming is incoming and call.state == "active":
            call.reoffered(incoming)
            return
        placed = self.dialler.live(incoming.call_id)
        if placed is not None and placed.record.status == "answered":
            placed.reoffered(incoming)
            return
        uas.answer_in_dialog(incoming, 481, _REASONS[481])

    def _updated(self, incoming: IncomingCall, request: SipRequest) -> SdpMessage | None:
        """An UPDATE on an answered call's dialog (aiosipua passes those of placed calls to nobody: it answers an
        offer in one 488, a refresh 200): the offer's answer, or None (aiosipua answers 488, or 200 to no offer)."""
        call = self._calls.get(incoming.call_id)
        if call is None or call.incoming is not incoming or call.state != "active":
            return None
        return call.updated(request, str(incoming.source_addr[0]))

    def _caller_left(self, call: SipCall, why: str) -> None:
        if self._calls.remove(call):
            call.caller_left(why)

    def _transfer_progress(self, sip_call_id: str, status: int, reason: str) -> None:
        call = self._calls.get(sip_call_id)
        logger.info("SIP call %s: transfer %s %s", call.id if call else sip_call_id[:100], status, reason)

    def forget(self, call: SipCall) -> None:
        """The call is over: out of the table, and aiosipua's dialog and INVITE transaction of it dropped."""
        branch = self._calls.branch(call) or uas.branch_of(call.incoming.invite)
        self._calls.remove(call)
        uas.release(self._agent_of(call.incoming), call.incoming, branch)

    def _agent_of(self, incoming: IncomingCall) -> SipUAS:
        return next(agent for agent in self._agents if agent.transport is incoming.transport)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_REASONS = {  # a status's phrase (the log line says why); others (400, 503) carry the reason itself
    401: "Unauthorized",
    403: "Forbidden",
    481: "Call/Transaction Does Not Exist",
    482: "Loop Detected",
    491: "Request Pending",
    488: "Not Acceptable Here",
    500: "Server Internal Error",
}
