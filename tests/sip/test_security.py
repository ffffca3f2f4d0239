"""Who may call, and how privately: digest logins, trusted trunk addresses, SIP over TLS and SRTP, with real phones.

Two servers: ``locked`` knows two logins (``S2S_SIP_USERS``) and listens on TLS too, with a
certificate made here; ``trunk`` trusts 127.0.0.1 (``S2S_SIP_TRUSTED``) and requires SRTP.
A refused INVITE must leave the pool and the audit as they were: no unit, no session row.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.sip.conftest import free_units, loud_seconds, sip_server, sip_sessions, wait_free
from tests.sip.test_malformed import invite, sip_port
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port

PASSWORD = "s3cret:with-colon"
OFFER = (
    "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 5998 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "sip.crt", directory / "sip.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def locked(tmp_path_factory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("sip-locked")
    cert, key = self_signed(directory)
    tls_port = free_port()
    live = sip_server(
        directory,
        S2S_SIP_USERS=f"phone:{PASSWORD},other:pw",
        S2S_SIP_TLS_BIND=f"127.0.0.1:{tls_port}",
        S2S_SIP_TLS_CERT=str(cert),
        S2S_SIP_TLS_KEY=str(key),
    )
    live.tls_uri = f"{live.sip_uri.rsplit(':', 1)[0]}:{tls_port};transport=tls"  # type: ignore[attr-defined]
    yield live
    live.stop()


@pytest.fixture(scope="module")
def trunk(tmp_path_factory) -> Iterator[LiveServer]:
    live = sip_server(tmp_path_factory.mktemp("sip-trunk"), S2S_SIP_TRUSTED="127.0.0.1/32", S2S_SIP_SRTP="required")
    yield live
    live.stop()


def exchange(port: int, message: bytes, source: str = "127.0.0.1", final: bool = True) -> list[str]:
    """Sends one SIP message over UDP and returns the answers, up to the first final one (bounded: 10 s)."""
    answers: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind((source, 0))
        udp.settimeout(10)
        udp.sendto(message, ("127.0.0.1", port))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answer = udp.recv(65536).decode(errors="replace")
            answers.append(answer)
            if not final or not answer.startswith("SIP/2.0 1"):
                break
    return answers


def challenges(response: str) -> list[dict[str, str]]:
    values = re.findall(r"^WWW-Authenticate: Digest (.*)$", response, flags=re.MULTILINE | re.IGNORECASE)
    return [dict(re.findall(r'(\w+)="?([^",]*)"?', value.strip())) for value in values]


def digest_header(challenge: dict[str, str], user: str, password: str, uri: str, algorithm: str = "MD5") -> str:
    """The Authorization a phone computes (RFC 7616 with qop=auth), written independently of the server's code."""
    h = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}[algorithm]

    def hex_of(text: str) -> str:
        return h(text.encode()).hexdigest()

    ha1 = hex_of(f"{user}:{challenge['realm']}:{password}")
    ha2 = hex_of(f"INVITE:{uri}")
    response = hex_of(f"{ha1}:{challenge['nonce']}:00000001:abcdef:auth:{ha2}")
    return (
        f'Digest username="{user}", realm="{challenge["realm"]}", nonce="{challenge["nonce"]}", uri="{uri}", '
        f'response="{response}", algorithm={algorithm}, qop=auth, nc=00000001, cnonce="abcdef"'
    )


def test_an_invite_without_credentials_is_challenged_and_claims_nothing(locked):
    before = len(sip_sessions(locked))
    answers = exchange(sip_port(locked), invite("nocreds1", OFFER))
    assert answers[-1].startswith("SIP/2.0 401 Unauthorized")
    offered = challenges(answers[-1])
    assert {c["algorithm"] for c in offered} >= {"MD5"}
    assert all(c["realm"] == "s2s-realtime" and c["qop"] == "auth" and c["nonce"] for c in offered)
    assert free_units(locked) == 2
    # A flood of them, ten at a time (more could overflow the socket's buffer on a loaded machine): every one
    # is challenged, none claims a unit or opens a session.
    finals = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(10)
        for batch in range(20):
            for index in range(10):
                udp.sendto(invite(f"flood{batch}-{index}", OFFER), ("127.0.0.1", sip_port(locked)))
            while finals < (batch + 1) * 10:
                answer = udp.recv(65536).decode(errors="replace")
                assert answer.startswith(("SIP/2.0 100", "SIP/2.0 401"))
                finals += answer.startswith("SIP/2.0 401")
    assert free_units(locked) == 2
    assert len(sip_sessions(locked)) == before


def test_a_wrong_password_is_forbidden_and_a_good_one_for_another_nonce_is_stale(locked):
    port = sip_port(locked)
    challenge = next(c for c in challenges(exchange(port, invite("wrong1", OFFER))[-1]) if c["algorithm"] == "MD5")
    bad = digest_header(challenge, "phone", "not-it", "sip:agent@127.0.0.1")
    assert exchange(port, invite("wrong2", OFFER, Authorization=bad))[-1].startswith("SIP/2.0 403")
    unknown = digest_header(challenge, "mallory", PASSWORD, "sip:agent@127.0.0.1")
    # From an address of its own: a peer's refusals of one status are logged once a minute (with a count).
    assert exchange(port, invite("wrong3", OFFER, Authorization=unknown), source="127.0.0.3")[-1].startswith(
        "SIP/2.0 403"
    )
    forged = digest_header(dict(challenge, nonce="1.forged"), "phone", PASSWORD, "sip:agent@127.0.0.1")
    stale = exchange(port, invite("wrong4", OFFER, Authorization=forged))[-1]
    assert stale.startswith("SIP/2.0 401") and "stale=true" in stale
    assert free_units(locked) == 2
    assert "SIP INVITE from 127.0.0.3 refused (403): bad credentials for 'mallory'" in locked.full_log()


def call_and_hear(server, phone, uri: str, logged: str) -> None:
    """``phone`` calls ``uri``, hears the reply and hangs up; the server logged ``logged`` and has both units back."""
    phone.dial(uri)
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what=f"the reply heard by the phone at {uri}")
    assert logged in server.full_log()
    phone.hang_up()
    assert wait_free(server, 2) == 2


def test_a_phone_with_the_right_password_is_answered_and_hears_the_reply(locked, phones):
    call_and_hear(locked, phones(account=f";auth_pass={PASSWORD}"), locked.sip_uri, "authenticated as 'phone'")


def test_a_phone_with_a_wrong_password_is_refused_and_holds_nothing(locked, phones):
    before = len(sip_sessions(locked))
    phone = phones(account=";auth_pass=guess")
    phone.dial(locked.sip_uri)
    wait_for(lambda: "403 Forbidden" in phone.log(), 15, what="403 Forbidden at the phone")
    assert free_units(locked) == 2
    assert len(sip_sessions(locked)) == before  # no session was opened: nothing was claimed


def test_an_srtp_call_over_tls_is_answered_heard_and_hung_up(locked, phones):
    byes = locked.full_log().count("the caller hung up (BYE)")
    tls_port = int(locked.tls_uri.split(";")[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as plain:  # no TLS: no SIP answer
        plain.sendall(invite("plain-on-tls", OFFER).replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
        try:
            answer = plain.recv(65536)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"SIP/2.0 ")  # a TLS alert, or the connection closed
    # Heard only if both ends agree on the keys: a packet that does not authenticate is dropped, not played.
    phone = phones(account=f";auth_pass={PASSWORD};mediaenc=srtp-mand")
    call_and_hear(locked, phone, locked.tls_uri, "SRTP (AES_CM_128_HMAC_SHA1")
    wait_for(lambda: locked.full_log().count("the caller hung up (BYE)") == byes + 1, 10, what="the BYE over TLS")


def test_a_trusted_trunk_calls_without_a_password_with_srtp(trunk, phones):
    call_and_hear(trunk, phones(account=";mediaenc=srtp-mand"), trunk.sip_uri, "SRTP (AES_CM_128_HMAC_SHA1")


def test_a_plain_rtp_call_to_a_server_that_requires_srtp_gets_488_and_holds_nothing(trunk, phones):
    before = len(sip_sessions(trunk))
    phone = phones()
    phone.dial(trunk.sip_uri)
    wait_for(lambda: "488 Not Acceptable Here" in phone.log(), 15, what="488 at the phone")
    assert free_units(trunk) == 2
    assert len(sip_sessions(trunk)) == before


def test_an_address_the_trunk_server_does_not_trust_is_forbidden(trunk):
    answer = exchange(sip_port(trunk), invite("stranger1", OFFER), source="127.0.0.2")[-1]
    assert answer.startswith("SIP/2.0 403")
    assert free_units(trunk) == 2
