"""The SIP gate's parts on their own: digest checks, nonces, the SRTP policy and keys, the settings that feed them,
the offer's audio address, RTP latching and the refusals' log."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import random
import socket
import struct

import pytest
from aiosipua import SipMessage, parse_sdp
from aiosipua.transaction import TransactionLayer
from django.core.exceptions import ImproperlyConfigured

from realtime.transports.sip import config, guard, uas
from realtime.transports.sip.auth import NONCE_TTL_S, DigestAuth, parse_digest
from realtime.transports.sip.media import GuardedRTPSession
from realtime.transports.sip.srtp import Crypto, SrtpContext, Unacceptable, choose, parse_crypto
from s2s_project import settings as project_settings

REALM = "s2s-realtime"
KEY = base64.b64encode(bytes(range(30))).decode()


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def gate(**overrides) -> DigestAuth:
    options = {"users": {"alice": "wonderland"}, "trusted": (), "realm": REALM, "clock": Clock()}
    return DigestAuth(**{**options, **overrides})


def authorization(
    nonce: str,
    user: str = "alice",
    password: str = "wonderland",
    algorithm: str = "MD5",
    nc: str = "00000001",
    realm: str = REALM,
    qop: bool = True,
) -> str:
    """What a phone sends, computed here from RFC 7616 (not with the server's code)."""
    h = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}[algorithm]

    def hex_of(text: str) -> str:
        return h(text.encode()).hexdigest()

    ha1, ha2 = hex_of(f"{user}:{realm}:{password}"), hex_of("INVITE:sip:agent@example.com")
    if not qop:
        return (
            f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="sip:agent@example.com", '
            f'response="{hex_of(f"{ha1}:{nonce}:{ha2}")}"'
        )
    response = hex_of(f"{ha1}:{nonce}:{nc}:0a4f113b:auth:{ha2}")
    return (
        f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="sip:agent@example.com", '
        f'response="{response}", algorithm={algorithm}, qop=auth, nc={nc}, cnonce="0a4f113b"'
    )


def test_without_users_or_trusted_addresses_everyone_is_let_in():
    assert DigestAuth({}, (), REALM).check("203.0.113.9", "INVITE", []).admitted


def test_a_trusted_network_needs_no_credentials_and_others_are_challenged():
    auth = gate(trusted=config.parse_trusted("198.51.100.0/24, 203.0.113.10"))
    assert auth.check("198.51.100.77", "INVITE", []).trusted
    assert auth.check("203.0.113.10", "INVITE", []).trusted
    verdict = auth.check("203.0.113.11", "INVITE", [])
    assert (verdict.status, verdict.reason) == (401, "no credentials")
    trusted_only = gate(users={}, trusted=config.parse_trusted("198.51.100.0/24"))
    assert trusted_only.check("203.0.113.11", "INVITE", []).status == 403  # no login could ever pass


def test_the_challenge_offers_the_configured_algorithms_with_qop_auth():
    auth = gate(algorithms=("SHA-256", "MD5"))
    first, second = auth.challenge()
    assert first.startswith(f'Digest realm="{REALM}", nonce="') and 'algorithm=SHA-256, qop="auth"' in first
    assert "algorithm=MD5" in second and "stale" not in second
    assert all("stale=true" in value for value in auth.challenge(stale=True))
    assert parse_digest(first)["realm"] == REALM


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_a_good_response_is_admitted_once_per_nonce_count(algorithm):
    auth = gate(algorithms=("SHA-256", "MD5"))
    nonce = auth.nonce()
    verdict = auth.check("203.0.113.9", "INVITE", [authorization(nonce, algorithm=algorithm)])
    assert verdict.admitted and verdict.user == "alice"
    replayed = auth.check("203.0.113.9", "INVITE", [authorization(nonce, algorithm=algorithm)])
    assert (replayed.status, replayed.stale) == (401, True)  # an overheard Authorization cannot ring again
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, algorithm=algorithm, nc="00000002")]).admitted


def test_an_algorithm_not_configured_is_not_accepted():
    auth = gate()  # MD5 only
    assert auth.check("203.0.113.9", "INVITE", [authorization(auth.nonce(), algorithm="SHA-256")]).status == 403


def test_a_wrong_password_or_an_unknown_user_is_forbidden():
    auth = gate()
    nonce = auth.nonce()
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, password="guess")]).status == 403
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, user="bob")]).status == 403
    assert auth.check("203.0.113.9", "INVITE", ['Digest username="alice", realm="s2s-realtime"']).status == 403
    assert auth.check("203.0.113.9", "INVITE", ["Basic YWxpY2U6d29uZGVybGFuZA=="]).status == 403
    assert auth.check("203.0.113.9", "INVITE", ['Digest username="\u00e9", response="\u00e9"']).status == 401
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, realm="elsewhere")]).status == 401


def test_an_old_or_foreign_nonce_is_stale_so_the_phone_retries_without_asking_again():
    clock = Clock()
    auth = gate(clock=clock)
    nonce = auth.nonce()
    clock.now += NONCE_TTL_S + 1
    verdict = auth.check("203.0.113.9", "INVITE", [authorization(nonce)])
    assert (verdict.status, verdict.stale, verdict.reason) == (401, True, "an expired nonce")
    other_process = gate(clock=clock).nonce()  # another secret: a restarted server's nonces are not ours
    assert auth.check("203.0.113.9", "INVITE", [authorization(other_process)]).stale


def test_the_rfc_2069_form_without_qop_serves_once():
    auth = gate()
    nonce = auth.nonce()
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, qop=False)]).admitted
    assert auth.check("203.0.113.9", "INVITE", [authorization(nonce, qop=False)]).stale


def test_the_authorization_for_our_realm_is_the_one_read():
    auth = gate()
    nonce = auth.nonce()
    other = authorization(nonce, realm="proxy.example.com")
    assert auth.check("203.0.113.9", "INVITE", [other, authorization(nonce)]).admitted


def test_no_authorization_header_however_broken_makes_the_check_raise():
    rng = random.Random(30)
    auth = gate()
    good = authorization(auth.nonce())
    pieces = [
        "Digest",
        "Basic",
        " ",
        ",",
        "=",
        '"',
        "\\",
        "realm=",
        f'realm="{REALM}"',
        "username=",
        '"alice"',
        "nonce=",
        '"1.2"',
        "nc=",
        "zzzzzzzz",
        "00000001",
        "qop=",
        "auth",
        "auth-int",
        "algorithm=",
        "SHA-512",
        "MD5",
        "response=",
        "uri=",
        "\udcff",
        "\u00e9",
        "\x00",
        "a" * 300,
    ]
    for _ in range(3000):
        if rng.random() < 0.3:  # a good header with a piece cut out or spliced in
            cut = rng.randrange(len(good))
            header = good[:cut] + rng.choice(pieces) + good[cut + rng.randrange(3) :]
        else:
            header = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 25)))
        verdict = auth.check("203.0.113.9", "INVITE", [header])
        assert verdict.status in (0, 401, 403)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("alice", "is not user:password"),
        ("alice:", "is not user:password"),
        ("al ice:pw", "a SIP user is"),
        ("alice:a,alice:b", "named twice"),
    ],
)
def test_bad_users_are_refused(raw, error):
    with pytest.raises(config.SipConfigError, match=error):
        config.parse_users(raw)


def test_users_trusted_networks_and_algorithms_are_read():
    assert config.parse_users("alice:pw:with:colons, bob:x") == {"alice": "pw:with:colons", "bob": "x"}
    assert [str(n) for n in config.parse_trusted("10.0.0.0/8,::1")] == ["10.0.0.0/8", "::1/128"]
    with pytest.raises(config.SipConfigError):
        config.parse_trusted("10.0.0.300")
    assert config.parse_digest_algorithms("sha-256, md5") == ("SHA-256", "MD5")
    for bad in ("", "SHA-1", "MD5,MD5"):
        with pytest.raises(config.SipConfigError):
            config.parse_digest_algorithms(bad)
    assert "wonderland" not in repr(config.SipConfig(users={"alice": "wonderland"}))


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"S2S_SIP_TLS_BIND": "127.0.0.1:5061"}, "needs S2S_SIP_TLS_CERT and S2S_SIP_TLS_KEY"),
        (
            {"S2S_SIP_TLS_BIND": "127.0.0.1:5061", "S2S_SIP_TLS_CERT": "/nonexistent.pem", "S2S_SIP_TLS_KEY": "/x"},
            "is not a file",
        ),
        ({"S2S_SIP_USERS": "alice"}, "is not user:password"),
        ({"S2S_SIP_TRUSTED": "trunk.example.com"}, "not an IP address or a network"),
        ({"S2S_SIP_SRTP": "maybe"}, "S2S_SIP_SRTP"),
        ({"S2S_SIP_REALM": 'a"b'}, "S2S_SIP_REALM"),
    ],
)
def test_a_bad_security_setting_stops_the_start_with_a_clear_message(monkeypatch, env, says):
    monkeypatch.setenv("S2S_SIP_BIND", "127.0.0.1:5060")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=says):
        project_settings._sip_settings()


# --- SRTP ---------------------------------------------------------------------------


def test_crypto_lines_we_can_take_are_read_and_others_skipped():
    assert parse_crypto(f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}") == Crypto(
        "1", "AES_CM_128_HMAC_SHA1_80", bytes(range(30))
    )
    assert parse_crypto(f"2 AES_CM_128_HMAC_SHA1_32 inline:{KEY}|2^31").suite == "AES_CM_128_HMAC_SHA1_32"
    for skipped in (
        f"1 AES_256_CM_HMAC_SHA1_80 inline:{KEY}",  # a suite we do not run
        f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY}|2^20|1:4",  # an MKI
        f"1 AES_CM_128_HMAC_SHA1_80 inline:{KEY} UNENCRYPTED_SRTP",  # session parameters
        "1 AES_CM_128_HMAC_SHA1_80 inline:c2hvcnQ=",  # a key of the wrong size
        "1 AES_CM_128_HMAC_SHA1_80 inline:%%%",
        "garbage",
    ):
        assert parse_crypto(skipped) is None, skipped


def test_the_srtp_policy_decides_what_an_offer_gets():
    line = [f"1 AES_CM_128_HMAC_SHA1_32 inline:{KEY}", f"2 AES_CM_128_HMAC_SHA1_80 inline:{KEY}"]
    assert choose("RTP/SAVP", line, "optional").tag == "2"  # the _80 suite first
    assert choose("RTP/AVP", line, "required").tag == "2"  # best-effort SRTP in an RTP/AVP offer
    assert choose("RTP/AVP", [], "optional") is None
    assert choose("RTP/AVP", line, "off") is None  # plain RTP answered plain
    for proto, lines, policy in (
        ("RTP/SAVP", line, "off"),
        ("RTP/SAVP", [], "optional"),
        ("RTP/SAVP", ["1 F8_128_HMAC_SHA1_80 inline:x"], "required"),
        ("RTP/AVP", [], "required"),
    ):
        with pytest.raises(Unacceptable):
            choose(proto, lines, policy)


def rtp(seq: int, ssrc: int = 7) -> bytes:
    return struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + bytes([seq % 256]) * 160


def test_two_ends_keyed_from_each_others_sdp_hear_each_other_and_tampering_is_dropped():
    caller_key = os.urandom(30)
    server = SrtpContext(Crypto("1", "AES_CM_128_HMAC_SHA1_80", caller_key))
    answer = parse_crypto(server.answer)
    assert answer is not None and answer.tag == "1" and answer.key == server.local_key != caller_key
    caller = SrtpContext(Crypto("1", "AES_CM_128_HMAC_SHA1_80", answer.key), local_key=caller_key)
    for seq in range(3):
        protected = caller.protect(rtp(seq), rtcp=False)
        assert protected is not None and protected != rtp(seq) and len(protected) == len(rtp(seq)) + 10
        assert server.unprotect(protected, rtcp=False) == rtp(seq)
        back = server.protect(rtp(seq, ssrc=9), rtcp=False)
        assert caller.unprotect(back, rtcp=False) == rtp(seq, ssrc=9)
    tampered = bytearray(caller.protect(rtp(5), rtcp=False))
    tampered[20] ^= 1
    assert server.unprotect(bytes(tampered), rtcp=False) is None
    assert server.unprotect(rtp(6), rtcp=False) is None  # plain RTP on an SRTP call
    assert server.rejected == 2
    report = struct.pack("!BBHI", 0x80, 201, 1, 7)  # an empty receiver report
    assert server.unprotect(caller.protect(report, rtcp=True), rtcp=True) == report


async def test_an_srtp_session_protects_what_it_sends_and_plays_only_what_authenticates():
    caller_key = os.urandom(30)
    heard: list[bytes] = []
    session = await GuardedRTPSession.create(
        local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", 9), payload_type=0, jitter_prefetch=0
    )
    session.srtp = SrtpContext(Crypto("1", "AES_CM_128_HMAC_SHA1_80", caller_key))
    caller = SrtpContext(Crypto("1", "AES_CM_128_HMAC_SHA1_80", session.srtp.local_key), local_key=caller_key)
    session.allowed_hosts = frozenset({"127.0.0.1"})
    session.on_audio = lambda pcm, _ts: heard.append(pcm)
    port = session._rtp_transport._transport.get_extra_info("sockname")[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as phone:
        phone.bind(("127.0.0.1", 0))
        phone.settimeout(5)
        session.update_remote(phone.getsockname())
        try:
            for seq in range(5):
                phone.sendto(rtp(seq), ("127.0.0.1", port))  # plain: dropped
            await asyncio.sleep(0.2)
            assert heard == [] and session.refused == 5
            for seq in range(5, 10):
                phone.sendto(caller.protect(rtp(seq), rtcp=False), ("127.0.0.1", port))
            await asyncio.sleep(0.2)
            assert len(heard) >= 4
            session.send_audio_pcm_auto(b"\x00\x00" * 160)
            sent = await asyncio.get_running_loop().run_in_executor(None, phone.recv, 2048)
            clear = caller.unprotect(sent, rtcp=False)
            assert clear is not None and clear[12:] == b"\xff" * 160  # silence in μ-law, once decrypted
        finally:
            await session.close()


async def test_rtp_is_latched_to_the_first_packets_port_and_another_port_of_the_same_host_is_dropped():
    heard: list[bytes] = []
    session = await GuardedRTPSession.create(
        local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", 9), payload_type=0, jitter_prefetch=0, symmetric_rtp=True
    )
    session.allowed_hosts = frozenset({"127.0.0.1"})
    session.on_audio = lambda pcm, _ts: heard.append(pcm)
    port = session._rtp_transport._transport.get_extra_info("sockname")[1]
    try:
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as caller,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other,
        ):
            caller.bind(("127.0.0.1", 0))
            other.bind(("127.0.0.1", 0))
            for seq in range(5):
                caller.sendto(rtp(seq), ("127.0.0.1", port))
            await asyncio.sleep(0.2)
            assert session._remote_addr == caller.getsockname() and len(heard) >= 4
            for seq in range(5, 10):  # the caller's host, another port: before, the media followed it
                other.sendto(rtp(seq, ssrc=8), ("127.0.0.1", port))
            await asyncio.sleep(0.2)
            assert session._remote_addr == caller.getsockname() and session.refused == 5
            assert session.rtp_source == caller.getsockname()
    finally:
        await session.close()


# --- what the SIP side takes from the network ---------------------------------------------------


def offer_with(connection: str) -> object:
    return parse_sdp(
        f"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN {connection}\r\nt=0 0\r\n"
        "m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )


@pytest.mark.parametrize(
    ("connection", "family", "caller", "problem"),
    [
        ("IP4 198.51.100.7", 4, "198.51.100.7", None),
        ("IP4 10.0.0.5", 4, "203.0.113.1", None),  # a phone behind NAT: its private address, latched later
        ("IP4 127.0.0.1", 4, "127.0.0.1", None),
        ("IP4 127.0.0.1", 4, "203.0.113.1", "is a loopback address"),  # RTP to the server's own ports
        ("IP6 ::1", 4, "127.0.0.1", "is not IPv4"),
        ("IP6 fe80::1", 4, "127.0.0.1", "is not IPv4"),
        ("IP6 fe80::1", 6, "2001:db8::1", "is not a unicast address"),
        ("IP6 2001:db8::7", 6, "2001:db8::1", None),
        ("IP4 255.255.255.255", 4, "127.0.0.1", "is not a unicast address"),
        ("IP4 224.0.0.1", 4, "127.0.0.1", "is not a unicast address"),
        ("IP4 169.254.10.1", 4, "127.0.0.1", "is not a unicast address"),
        ("IP4 0.0.0.0", 4, "127.0.0.1", "cannot be sent to"),
    ],
)
def test_an_offers_audio_address_must_be_one_unicast_host_of_the_listeners_family(connection, family, caller, problem):
    found = guard.offer_problem(offer_with(connection), family, caller)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_refusals_are_logged_once_per_peer_and_status_a_minute_with_how_many_were_not(caplog):
    clock = Clock()
    log = guard.RefusalLog("SIP", clock=clock)
    with caplog.at_level(logging.INFO, logger="realtime.transports.sip.guard"):
        assert log.refused("203.0.113.9", 403, "not a trusted address")
        assert not any(log.refused("203.0.113.9", 403, "not a trusted address") for _ in range(499))
        assert log.refused("203.0.113.9", 401, "no credentials")  # another status: a line of its own
        assert log.refused("198.51.100.1", 403, "not a trusted address")  # another peer
        clock.now += guard.REFUSAL_LOG_INTERVAL_S
        assert log.refused("203.0.113.9", 403, "not a trusted address")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 4 and log.count == 503
    assert "499 from it not logged" in lines[-1] and "503 refused in all" in lines[-1]


def test_refusals_from_many_peers_are_bounded_in_lines_and_in_memory(caplog):
    clock = Clock()
    log = guard.RefusalLog("SIP", clock=clock)
    with caplog.at_level(logging.INFO, logger="realtime.transports.sip.guard"):
        logged = sum(log.refused(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", 403, "x") for i in range(20000))
    assert logged == guard.REFUSAL_LINES_PER_INTERVAL == len(caplog.records)
    assert len(log._peers) == guard.MAX_PEERS_REMEMBERED


def test_a_new_transaction_does_not_scan_the_others(monkeypatch):
    scans: list[int] = []
    monkeypatch.setattr(TransactionLayer, "_prune_expired", lambda layer: scans.append(len(layer._server)))
    layer = uas.Transactions()
    for index in range(1000):  # aiosipua scanned all of them for each new one: a flood cost O(n) per INVITE
        request = SipMessage.parse(
            f"INVITE sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{index}\r\n"
            f"From: <sip:b@127.0.0.1>;tag=1\r\nTo: <sip:a@127.0.0.1>\r\nCall-ID: c{index}\r\nCSeq: 1 INVITE\r\n\r\n"
        )
        layer.create_server(request)
    assert scans == [0] and layer.get_server("z9hG4bK999", "INVITE") is not None
