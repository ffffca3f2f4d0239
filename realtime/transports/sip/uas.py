"""aiosipua's user agent server as the listener drives it: the one module that touches its private state.

aiosipua keeps its calls by Call-ID (``SipUAS._calls``) and its INVITE server transactions by
branch. The listener decides which request reaches them (:mod:`realtime.transports.sip.dialogs`);
here the agents of its transports share one table of calls, a call's state is dropped when the call
ends (aiosipua keeps a refused or hung-up dialog until an ACK that may never come, and the
transaction of an unanswered INVITE for 300 s), a call's timers are stopped, and a request is
answered without any state (a refusal before a dialog exists). A version bump of aiosipua is this
file's work (and :mod:`realtime.transports.sip.sockets`' for its transports).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from aiosipua import IncomingCall, SipRequest, SipResponse, SipUAC, SipUAS
from aiosipua.headers import parse_via
from aiosipua.transaction import TransactionLayer
from aiosipua.transport import SipTransport
from aiosipua.utils import generate_tag

PRUNE_EVERY_S = 5.0  # expired transactions are looked for this often, not on every new one


class Transactions(TransactionLayer):
    """aiosipua's transaction layer (found by branch in a dict), without its scan of every transaction each
    time one is made: a flood of INVITEs made each new one cost the whole table. The expired ones are
    pruned at most every :data:`PRUNE_EVERY_S`; the listener removes a call's own when the call ends."""

    def __init__(self) -> None:
        super().__init__()
        self._pruned_at = 0.0

    def _prune_expired(self) -> None:
        now = time.monotonic()
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            super()._prune_expired()


def make_agent(transport: SipTransport, advertised: tuple[str, int], user_agent: str, first: SipUAS | None) -> SipUAS:
    """A user agent server (with its client, for REFER) on ``transport``, sharing ``first``'s calls: the 200
    OK's Contact names no transport, so a caller that called over TCP may send its BYE over UDP (RFC 3261's
    default), and every agent must find the call."""
    uac = SipUAC(transport, advertised_addr=advertised)
    agent = SipUAS(transport, user_agent=user_agent, uac=uac, advertised_addr=advertised)
    agent.transactions = Transactions()
    if first is not None:
        agent._calls = first._calls
    return agent


def branch_of(request: SipRequest) -> str:
    """The branch of the request's top ``Via`` ("" none): its transaction (RFC 3261 s17.2.3)."""
    vias = request.headers.get("via")
    if not vias:
        return ""
    try:
        return parse_via(vias[0]).branch or ""
    except Exception:  # a Via the parser cannot read names no transaction
        return ""


def release(agent: SipUAS, incoming: IncomingCall, branch: str) -> None:
    """Drops what aiosipua holds of a call that ended or was refused: its entry by Call-ID (if it is still
    this call's) and the INVITE transaction of ``branch``. No ACK is awaited: a late one finds nothing and
    is ignored, as a refused INVITE's always was."""
    if agent._calls.get(incoming.call_id) is incoming:
        del agent._calls[incoming.call_id]
    if branch:
        transaction = agent.transactions.get_server(branch, "INVITE")
        if transaction is not None:
            agent.transactions.remove(transaction)


def held(agent: SipUAS) -> tuple[int, int]:
    """How many calls and server transactions aiosipua holds (what a flood must not grow)."""
    return len(agent._calls), len(agent.transactions.server_transactions)


def stop_timers(incoming: IncomingCall) -> None:
    """Stops the call's retransmissions and session timer (the call is torn down)."""
    incoming._stop_retransmissions()


def answer_in_dialog(incoming: IncomingCall, status: int, reason: str) -> Callable[[], None]:
    """A final answer to an in-dialog request held in ``incoming`` (a re-INVITE refused: 488), the dialog kept
    (aiosipua's ``IncomingCall.reject`` would end the dialog with it); returns what sends it again (a
    retransmission of the request gets it again)."""
    response = incoming.dialog.create_response(incoming.invite, status, reason)
    if incoming.user_agent:
        response.headers.set_single("User-Agent", incoming.user_agent)
    transport = incoming.transport

    def send() -> None:
        if transport is not None:
            transport.send_reply(response)

    send()
    return send


def answer(
    transport: SipTransport,
    request: SipRequest,
    addr: tuple[str, int],
    status: int,
    reason: str,
    user_agent: str,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """A final response to ``request`` that needs no dialog (a refusal before one exists), sent back to where
    the request came from (its ``Via`` is not trusted to route it); the ``To`` gets a tag of its own
    (RFC 3261 s8.2.6.2), so the caller's ACK of it matches nothing here."""
    response = SipResponse(status_code=status, reason_phrase=reason)
    for via in request.headers.get("via"):
        response.headers.append("Via", via)
    for name, header in (("from", "From"), ("to", "To"), ("call-id", "Call-ID"), ("cseq", "CSeq")):
        value = request.headers.get_first(name)
        if value:
            if name == "to" and ";tag=" not in value.replace(" ", "").lower() and status > 100:
                value = f"{value};tag={generate_tag()}"
            response.headers.set_single(header, value)
    for name, value in headers:
        response.headers.append(name, value)
    response.headers.set_single("User-Agent", user_agent)
    transport.send(response, addr)
