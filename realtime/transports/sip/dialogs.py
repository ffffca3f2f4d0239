"""Which call a SIP request belongs to, decided before aiosipua sees it: the owner rule below the routes.

A request acts only on the dialog or transaction it belongs to (RFC 3261 s9.2, s12.2.2, s17.2.3):

- a ``CANCEL`` on the INVITE transaction of its branch, and only if that INVITE is the call's own, from the
  same source on the same transport, with the same ``Call-ID`` and From tag, and still ringing (after the
  final answer the transaction is over: 481);
- ``BYE``, a re-INVITE, ``ACK`` and every other in-dialog request by ``Call-ID`` and both tags, from the
  caller's host (its port may differ: a BYE may come over another transport or connection); a re-INVITE
  only once the call is answered (491 before);
- an INVITE without a To tag for a known ``Call-ID`` is the call's retransmission only if it is the same
  transaction (branch and source); otherwise it is a new INVITE, gated like any other, then refused as a
  duplicate (482) without touching the call.

The table of calls is found by ``Call-ID`` and by branch in dicts (no scan), and bounded per source
address and in all (:attr:`SipConfig.max_calls_per_address`, :attr:`SipConfig.max_calls`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiosipua import SipRequest

from realtime.transports.sip.uas import branch_of

if TYPE_CHECKING:
    from realtime.transports.sip.call import SipCall


class Action(enum.Enum):
    """What the listener does with a request (:meth:`CallTable.match`)."""

    PASS = "pass"  # aiosipua handles it (an out-of-dialog request, or one of its call's dialog)
    NEW = "new"  # an INVITE of a new transaction: the gate, then the table's bounds
    RETRANSMISSION = "retransmission"  # the call's own INVITE again: nothing new
    REFUSE = "refuse"  # answered ``status`` and not handed on
    DROP = "drop"  # an ACK that is not the call's: no answer (RFC 3261 s17.2.3)


@dataclass(frozen=True)
class Match:
    action: Action
    call: SipCall | None = None  # the call it belongs to; for NEW, the call whose Call-ID it repeats
    status: int = 0
    reason: str = ""  # why (logged; the phrase sent for 400 and 503)
    headers: tuple[tuple[str, str], ...] = ()  # of the refusal (a 401's challenge)


def refusal(status: int, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> Match:
    return Match(Action.REFUSE, status=status, reason=reason, headers=headers)


NO_DIALOG = refusal(481, "Call/Transaction Does Not Exist")


def tags(request: SipRequest) -> tuple[str, str]:
    """The request's From tag and To tag ("" where none)."""
    from_addr, to_addr = request.from_addr, request.to_addr
    return (from_addr.tag if from_addr else None) or "", (to_addr.tag if to_addr else None) or ""


@dataclass(frozen=True)
class _Entry:
    call: SipCall
    branch: str  # the call's own INVITE's (aiosipua replaces ``incoming.invite`` on a re-INVITE)
    host: str


class CallTable:
    """The listener's calls (ringing or answered), by ``Call-ID`` and by their INVITE's branch."""

    def __init__(self, max_per_address: int, max_total: int) -> None:
        self.max_per_address = max_per_address
        self.max_total = max_total
        self._by_call_id: dict[str, _Entry] = {}
        self._by_branch: dict[str, _Entry] = {}
        self._per_host: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._by_call_id)

    def __iter__(self) -> Iterator[SipCall]:
        return iter([entry.call for entry in self._by_call_id.values()])

    def get(self, call_id: str) -> SipCall | None:
        entry = self._by_call_id.get(call_id)
        return entry.call if entry is not None else None

    def of_branch(self, branch: str) -> SipCall | None:
        """The call whose INVITE was sent on ``branch`` (None: no INVITE transaction of ours)."""
        entry = self._by_branch.get(branch) if branch else None
        return entry.call if entry is not None else None

    def branch(self, call: SipCall) -> str:
        entry = self._by_call_id.get(call.sip_call_id)
        return entry.branch if entry is not None and entry.call is call else ""

    def full_for(self, host: str) -> str | None:
        """Why a new call from ``host`` cannot be held (answered 503), or None."""
        if len(self._by_call_id) >= self.max_total:
            return "too many calls"
        if self._per_host[host] >= self.max_per_address:
            return "too many calls from this address"
        return None

    def add(self, call: SipCall, branch: str) -> None:
        host = str(call.incoming.source_addr[0])
        entry = _Entry(call, branch, host)
        self._by_call_id[call.sip_call_id] = entry
        if branch:
            self._by_branch[branch] = entry
        self._per_host[host] += 1

    def remove(self, call: SipCall) -> bool:
        """Forgets ``call`` (False: it was not held, or another call holds its Call-ID now)."""
        entry = self._by_call_id.get(call.sip_call_id)
        if entry is None or entry.call is not call:
            return False
        del self._by_call_id[call.sip_call_id]
        if self._by_branch.get(entry.branch) is entry:
            del self._by_branch[entry.branch]
        self._per_host[entry.host] -= 1
        if self._per_host[entry.host] <= 0:
            del self._per_host[entry.host]
        return True

    def match(self, request: SipRequest, addr: tuple[str, int], transport: Any) -> Match:
        """What ``request``, from ``addr`` on ``transport``, belongs to (see the module's rules)."""
        method = request.method.upper()
        if method == "CANCEL":
            return self._cancel(request, addr, transport)
        entry = self._by_call_id.get(request.call_id or "")
        from_tag, to_tag = tags(request)
        if method == "INVITE" and not to_tag:
            if entry is None:
                return Match(Action.NEW)
            same_transaction = entry.branch and branch_of(request) == entry.branch
            if same_transaction and _same_source(entry.call, addr, transport) and from_tag == _remote_tag(entry):
                return Match(Action.RETRANSMISSION, entry.call)
            return Match(Action.NEW, entry.call)
        if method == "OPTIONS":
            return Match(Action.PASS)
        if entry is None:  # no call of ours: aiosipua answers 481 (a re-INVITE it would take for a new call)
            return NO_DIALOG if method == "INVITE" else Match(Action.PASS)
        dialog = entry.call.incoming.dialog
        if (from_tag, to_tag) != (dialog.remote_tag, dialog.local_tag) or str(addr[0]) != entry.host:
            return Match(Action.DROP) if method == "ACK" else NO_DIALOG
        if method == "INVITE" and entry.call.state != "active":  # aiosipua would take it for a second call
            return refusal(491, "a re-INVITE before the call was answered")
        return Match(Action.PASS, entry.call)

    def _cancel(self, request: SipRequest, addr: tuple[str, int], transport: Any) -> Match:
        entry = self._by_branch.get(branch_of(request))
        if entry is None or entry.call.sip_call_id != (request.call_id or ""):
            return NO_DIALOG
        if not _same_source(entry.call, addr, transport) or tags(request)[0] != _remote_tag(entry):
            return NO_DIALOG
        if entry.call.state != "ringing":  # answered (or ending): the INVITE transaction is over
            return NO_DIALOG
        return Match(Action.PASS, entry.call)


def _remote_tag(entry: _Entry) -> str:
    return entry.call.incoming.dialog.remote_tag


def _same_source(call: SipCall, addr: tuple[str, int], transport: Any) -> bool:
    """Whether a request came from where the call's INVITE came from: the same address, port and transport."""
    incoming = call.incoming
    return incoming.transport is transport and tuple(incoming.source_addr) == (str(addr[0]), int(addr[1]))
