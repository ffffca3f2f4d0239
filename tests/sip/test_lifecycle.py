"""The SIP listener lives and dies with the process, under both launchers; a shutdown hangs live calls up."""

from __future__ import annotations

import socket

import pytest

from tests.sip.conftest import free_units, loud_seconds, sip_server, wait_free
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port


def options(port: int, transport: str = "udp") -> str:
    """An OPTIONS ping to the listener; returns the status line of the answer ("" without one)."""
    request = (
        f"OPTIONS sip:ping@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/{transport.upper()} 127.0.0.1:5999;branch=z9hG4bKping{transport};rport\r\n"
        "From: <sip:probe@127.0.0.1>;tag=probe\r\nTo: <sip:ping@127.0.0.1>\r\n"
        f"Call-ID: ping-{transport}\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.settimeout(3)
        try:
            if transport == "udp":
                sock.sendto(request, ("127.0.0.1", port))
            else:
                sock.connect(("127.0.0.1", port))
                sock.sendall(request)
            return sock.recv(65536).decode(errors="replace").split("\r\n", 1)[0]
        except OSError:
            return ""


@pytest.mark.parametrize("launcher", ["daphne", "uvicorn"])
def test_the_listener_answers_on_udp_and_tcp_under_either_launcher_and_stops_with_the_process(tmp_path, launcher):
    server = sip_server(tmp_path, launcher=launcher)
    port = int(server.sip_uri.rsplit(":", 1)[1])
    try:
        assert options(port, "udp") == "SIP/2.0 200 OK"
        assert options(port, "tcp") == "SIP/2.0 200 OK"
    finally:
        server.stop()
    assert options(port, "udp") == ""


def test_a_shutdown_hangs_up_a_live_call(tmp_path, phones):
    server = sip_server(tmp_path, S2S_SHUTDOWN_GRACE_S="1")
    try:
        phone = phones()
        phone.dial(server.sip_uri)
        wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
        assert free_units(server) == 1
    finally:
        server.stop()  # SIGTERM: the drain ends the call after the grace period
    wait_for(phone.hung_up, 10, what="the BYE at the phone")


def test_a_sip_port_already_taken_is_logged_and_the_server_serves_on(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        server = LiveServer(tmp_path, env={"S2S_SIP_BIND": f"127.0.0.1:{port}"}).start(ready_timeout=180)
        try:
            wait_for(lambda: "a listener failed to start" in server.full_log(), 10, what="the failure logged")
            assert server.get("/healthz")[0] == 200
        finally:
            server.stop()


def test_a_call_beyond_the_rtp_ports_is_answered_503_and_holds_nothing(tmp_path, phones):
    first_port = 40000 + free_port() % 5000 * 2
    server = sip_server(tmp_path, S2S_SIP_RTP_PORTS=f"{first_port}-{first_port + 2}")  # one RTP/RTCP pair
    try:
        first, second = phones(), phones()
        first.dial(server.sip_uri)
        wait_for(lambda: free_units(server) == 1, 10, what="the first call holding a unit")
        second.dial(server.sip_uri)
        wait_for(lambda: "503 Service Unavailable" in second.log(), 10, what="503 at the second phone")
        assert free_units(server) == 1  # the second call's unit went back
        first.hang_up()
        assert wait_free(server, 2) == 2
    finally:
        server.stop()


def test_a_call_whose_webhook_cannot_be_reached_is_declined_503_and_holds_nothing(tmp_path, phones):
    secret = "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
    server = sip_server(
        tmp_path, S2S_SIP_WEBHOOK_URL=f"http://127.0.0.1:{free_port()}/hooks", S2S_SIP_WEBHOOK_SECRET=secret
    )
    try:
        phone = phones()
        phone.dial(server.sip_uri)
        wait_for(lambda: "503 Service Unavailable" in phone.log(), 20, what="503 at the phone")
        assert wait_free(server, 2) == 2
    finally:
        server.stop()
