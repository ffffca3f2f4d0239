"""The SIP listener of this process: aiosipua's user agent server on UDP, TCP and TLS, one :class:`SipCall` per INVITE.

aiosipua parses and answers SIP (RFC 3261: transactions, dialogs, 100 Trying, 2xx
retransmission until the ACK, CANCEL matching by branch, 400 for a request missing a
mandatory header, 405 for an unknown method, 481 for a request of no dialog); this
module decides what an INVITE becomes: a claimed unit and a ringing call, or ``486 Busy
Here`` when the pool is full. Before anything is claimed, an INVITE passes the gate:
a trusted source or valid digest credentials (:mod:`realtime.transports.sip.auth`, else
``401``/``403``), and an offer the SRTP policy takes (else ``488``); a refused INVITE
leaves nothing behind, not even aiosipua's dialog. The listener lives on the server's
event loop, started and stopped by :class:`realtime.node.runtime.Runtime` like the
process's other parts.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from aiortp.port_allocator import PortAllocator
from aiosipua import IncomingCall, SipRequest, SipResponse, SipUAC, SipUAS
from aiosipua.transport import SipTransport, TcpSipTransport
from django.conf import settings

from realtime.node.runtime import Runtime
from realtime.transports.sip import guard
from realtime.transports.sip.auth import DigestAuth
from realtime.transports.sip.call import SipCall
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.sockets import (
    TRANSPORT_NAMES,
    TcpBounds,
    TcpTransport,
    TlsTransport,
    UdpTransport,
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
        self.refused = 0  # INVITEs refused at the gate (no or bad credentials, an offer the SRTP policy refuses)
        self.runtime: Runtime | None = None
        self._agents: list[SipUAS] = []
        self._calls: dict[str, SipCall] = {}  # by SIP Call-ID
        self._tasks: set[asyncio.Task[Any]] = set()
        self.dropped = 0  # messages aiosipua parsed but could not handle
        self.bad_requests = 0  # requests answered 400 for an impossible Via or Contact
        self.restarts = 0  # transports started again after their socket closed
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def calls(self) -> dict[str, SipCall]:
        return dict(self._calls)

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
            context = server_tls_context(self.config)
            tls = TlsTransport(local_addr=tls_address, ssl_context=context, **bounds)
            transports.append((tls, self.config.tls_contact))
        for transport, advertised in transports:
            uac = SipUAC(transport, advertised_addr=advertised)
            agent = SipUAS(transport, user_agent=USER_AGENT, uac=uac, advertised_addr=advertised)
            agent.on_invite = self._on_invite
            agent.on_bye = lambda call, _request: self._caller_left(call.call_id, "the caller hung up (BYE)")
            agent.on_cancel = lambda request, _addr: self._caller_left(request.call_id or "", "the caller cancelled")
            agent.on_ack_timeout = lambda call: self._caller_left(call.call_id, "no ACK for the 200 OK")
            agent.on_transfer_progress = self._transfer_progress
            if self._agents:
                # One user agent on every transport: the 200 OK's Contact names no transport, so a caller that
                # called over TCP may send its BYE over UDP (RFC 3261's default); all find the call.
                agent._calls = self._agents[0]._calls
            await agent.start()
            transport.on_message = partial(self._guarded, transport, transport.on_message)
            self._agents.append(agent)
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
        for call in list(self._calls.values()):
            await call.finish("server_closed")
        for agent in self._agents:
            await agent.stop()
        self._agents.clear()
        for task in list(self._tasks):
            task.cancel()

    # --- requests ---------------------------------------------------------------------

    def _guarded(self, transport: SipTransport, dispatch: Any, message: Any, addr: tuple[str, int]) -> None:
        """aiosipua's handling of one message, after its ``Via`` and ``Contact`` are checked (a request that names
        an impossible port is answered 400, back where it came from); one that breaks aiosipua (a CSeq it cannot
        read) is dropped with a line counted, not a traceback for each of a flood."""
        try:
            if isinstance(message, SipRequest) and message.method != "ACK":
                problem = guard.request_problem(message)
                if problem is not None:
                    self._bad_request(transport, message, addr, problem)
                    return
            dispatch(message, addr)
        except Exception as exc:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning(
                    "SIP message from %s:%s dropped (%s: %s); %s so far", *addr, type(exc).__name__, exc, self.dropped
                )

    def _bad_request(self, transport: SipTransport, request: SipRequest, addr: tuple[str, int], why: str) -> None:
        """A 400 for ``request``, sent to its source address (its ``Via`` cannot be trusted to route it)."""
        self.bad_requests += 1
        if self.bad_requests == 1 or self.bad_requests % 100 == 0:
            logger.info("SIP %s from %s:%s refused (400 %s); %s so far", request.method, *addr, why, self.bad_requests)
        response = SipResponse(status_code=400, reason_phrase=why)
        for via in request.headers.get("via"):
            response.headers.append("Via", via)
        for name in ("from", "to", "call-id", "cseq"):
            value = request.headers.get_first(name)
            if value:
                response.headers.set_single(name.title() if name != "call-id" else "Call-ID", value)
        response.headers.set_single("User-Agent", USER_AGENT)
        transport.send(response, addr)

    def _carries_call(self, transport: TcpSipTransport, addr: tuple[str, int]) -> bool:
        """Whether a connection carries a live call (it is not closed for idling)."""
        return any(
            call.incoming.transport is transport and tuple(call.incoming.source_addr) == addr
            for call in self._calls.values()
        )

    @property
    def up(self) -> bool:
        """Whether every transport of the listener is listening (``/readyz`` and the metrics say so)."""
        return all(getattr(agent.transport, "alive", True) for agent in self._agents)

    async def _watch(self) -> None:
        """Starts again any transport whose socket closed (nothing should close it; if something does, the phone
        line must not stay dead until a restart), and tells the metrics each transport's state."""
        while True:
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

    def _on_invite(self, incoming: IncomingCall) -> None:
        agent = next(a for a in self._agents if a.transport is incoming.transport)
        known = self._calls.get(incoming.call_id)
        if known is not None:
            # A retransmitted INVITE (the first is still being answered): aiosipua made a new dialog for it,
            # with a tag of its own; the caller's ACK and BYE belong to the first one, which is put back.
            agent._calls[incoming.call_id] = known.incoming
            return
        try:
            admitted = self._admitted(agent, incoming)
        except Exception:  # a gate that breaks must still answer, and leave nothing behind
            logger.exception("SIP INVITE %s: the gate failed", incoming.call_id)
            self._refuse(agent, incoming, 500, "the gate failed")
            return
        if not admitted:
            return
        assert self.runtime is not None
        assert agent.uac is not None
        call = SipCall(incoming, self.runtime, self.config, self.ports, agent.uac)
        call.on_closed = self.forget
        self._calls[incoming.call_id] = call
        self._spawn(self._answer(call), f"invite-{call.id}")

    def _admitted(self, agent: SipUAS, incoming: IncomingCall) -> bool:
        """The gate, before anything is claimed: credentials (401 challenge, 403), then the SRTP policy (488)."""
        source_ip = incoming.source_addr[0]
        verdict = self.auth.check(source_ip, incoming.invite.method, incoming.invite.headers.get("authorization"))
        if not verdict.admitted:
            challenge = self.auth.challenge(stale=verdict.stale) if verdict.status == 401 else []
            self._refuse(agent, incoming, verdict.status, verdict.reason, challenge)
            return False
        problem = guard.offer_problem(incoming.sdp_offer)
        if problem is not None:
            self._refuse(agent, incoming, 488, problem)
            return False
        offer = incoming.sdp_offer.audio if incoming.sdp_offer is not None else None
        if offer is not None:
            try:
                choose(offer.proto, offer.attributes.get("crypto", []), self.config.srtp)
            except Unacceptable as exc:
                self._refuse(agent, incoming, 488, str(exc))
                return False
        if verdict.user:
            logger.info("SIP INVITE %s from %s: authenticated as %r", incoming.call_id, source_ip, verdict.user)
        return True

    def _refuse(
        self, agent: SipUAS, incoming: IncomingCall, status: int, why: str, challenge: list[str] | None = None
    ) -> None:
        """A final answer to an INVITE that never became a call; aiosipua forgets it at once (no ACK awaited),
        so a flood of refused INVITEs holds no memory. Logged on the first and every 100th."""
        response = incoming.dialog.create_response(incoming.invite, status)
        for value in challenge or []:
            response.headers.append("WWW-Authenticate", value)
        if agent.user_agent:
            response.headers.set_single("User-Agent", agent.user_agent)
        incoming.dialog.terminate()
        if agent._calls.get(incoming.call_id) is incoming:
            del agent._calls[incoming.call_id]
        agent._remove_invite_transaction(incoming.invite)
        self.refused += 1
        if status != 401 or why != "no credentials" or self.refused % 100 == 1:
            logger.info(
                "SIP INVITE from %s:%s refused (%s): %s; %s refused so far",
                *incoming.source_addr,
                status,
                why,
                self.refused,
            )
        assert incoming.transport is not None
        incoming.transport.send_reply(response)

    async def _answer(self, call: SipCall) -> None:
        """Claims and rings; then the default session answers, or the webhook is told and the operator does."""
        try:
            if not await call.ring():
                self._calls.pop(call.sip_call_id, None)
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
            logger.exception("SIP call %s: could not be answered", call.id)
            await call.finish("error")
        finally:
            if call.state == "ended":  # refused before it rang
                self.forget(call)

    def _caller_left(self, sip_call_id: str, why: str) -> None:
        call = self._calls.pop(sip_call_id, None)
        if call is not None:
            call.caller_left(why)

    def _transfer_progress(self, sip_call_id: str, status: int, reason: str) -> None:
        call = self._calls.get(sip_call_id)
        logger.info("SIP call %s: transfer %s %s", call.id if call else sip_call_id, status, reason)

    def forget(self, call: SipCall) -> None:
        self._calls.pop(call.sip_call_id, None)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
