"""Phone calls from a real SIP phone (baresip) on loopback: answered through the pool, heard, and always let go."""

from __future__ import annotations

import os
import signal

import pytest

from tests.sip.conftest import a_tone, free_units, loud_seconds, sip_sessions, wait_free
from tests.support.polling import wait_for


def ended_row(server, after: set[str]) -> dict:
    """The newest SIP session row not in ``after`` once it has ended (written by the server's record thread)."""

    def find() -> dict | None:
        rows = [row for row in sip_sessions(server) if row["id"] not in after and row["end_reason"] != "active"]
        return rows[0] if rows else None

    return wait_for(find, 15, what="an ended SIP session in the audit")


def known_sessions(server) -> set[str]:
    return {row["id"] for row in sip_sessions(server)}


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
def test_a_call_is_answered_through_the_pool_and_the_caller_hears_the_reply(server, phones, codec):
    before = known_sessions(server)
    phone = phones(codec=codec)
    phone.dial(server.sip_uri)
    wait_for(lambda: free_units(server) == 1, 10, what="the call holding a unit")
    # The loopback profile echoes the caller's turn (1.5 s of tone): the phone hears it come back.
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    phone.hang_up()
    assert wait_free(server, 2) == 2
    row = ended_row(server, before)
    assert row["transport"] == "sip"
    assert row["end_reason"] == "client_closed"
    assert row["turns"] >= 1
    assert row["caller"] == "*hone"  # "phone", masked to its last four characters (S2S_SIP_NUMBERS=masked)
    assert row["callee"] == "********1234"
    assert (row["direction"], row["call_status"], row["sip_code"]) == ("inbound", "", None)
    assert row["client_addr"].startswith("127.0.0.1:")
    assert "baresip" in row["user_agent"]


def test_a_third_call_on_a_pool_of_two_is_answered_busy_and_holds_nothing(server, phones, tmp_path):
    long_turn = a_tone(tmp_path, seconds=1.0, then_silence=60)
    first, second = phones(long_turn), phones(long_turn)
    first.dial(server.sip_uri)
    second.dial(server.sip_uri)
    wait_for(lambda: free_units(server) == 0, 10, what="both units held")
    third = phones(long_turn)
    third.dial(server.sip_uri)
    wait_for(lambda: "486 Busy Here" in third.log(), 10, what="486 Busy Here at the third phone")
    assert free_units(server) == 0
    first.hang_up()
    assert wait_free(server, 1) == 1  # the busy call held nothing: only the first call's unit came back
    second.hang_up()
    assert wait_free(server, 2) == 2


def test_a_caller_that_hangs_up_mid_answer_frees_the_unit(server, phones, tmp_path):
    before = known_sessions(server)
    phone = phones(a_tone(tmp_path, seconds=4.0))  # a long turn: a 4 s echo to interrupt
    phone.dial(server.sip_uri)
    wait_for(lambda: loud_seconds(*phone.heard()) >= 0.3, 30, what="the reply starting at the phone")
    phone.hang_up()
    assert wait_free(server, 2) == 2
    assert ended_row(server, before)["end_reason"] == "client_closed"


def test_a_caller_whose_rtp_stops_is_hung_up_and_the_unit_comes_back(server, phones):
    before = known_sessions(server)
    phone = phones()
    phone.dial(server.sip_uri)
    wait_for(lambda: free_units(server) == 1, 10, what="the call holding a unit")
    assert phone.process is not None
    os.kill(phone.process.pid, signal.SIGSTOP)  # the phone freezes: no RTP, no RTCP, no BYE
    try:
        assert wait_free(server, 2, timeout=15) == 2  # S2S_SIP_RTP_TIMEOUT_S=3
    finally:
        os.kill(phone.process.pid, signal.SIGCONT)
    assert ended_row(server, before)["end_reason"] == "client_closed"


def test_a_call_over_tcp_is_answered_heard_and_hung_up(server, phones):
    before, byes = known_sessions(server), server.full_log().count("the caller hung up (BYE)")
    phone = phones()
    phone.dial(server.sip_uri + ";transport=tcp")
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard over a TCP call")
    phone.hang_up()
    assert wait_free(server, 2) == 2
    assert ended_row(server, before)["end_reason"] == "client_closed"
    assert server.full_log().count("the caller hung up (BYE)") == byes + 1  # the BYE ended it, not the RTP timeout
