"""A callee of raw SIP on a UDP socket for the outbound tests: busy, ringing for ever, or a trunk's digest challenge."""

from __future__ import annotations

import hashlib
import re
import socket
import threading

from aiosipua import SipMessage, SipRequest

TRUNK_USER, TRUNK_PASSWORD, TRUNK_REALM, TRUNK_NONCE = "trunkuser", "trunk-secret", "trunk.example", "5f1e0c"


class Responder:
    """A callee of raw SIP on a UDP socket: ``answer`` is what it says to an INVITE (``busy``: 100 then 486;
    ``ring``: 180 and nothing more until a CANCEL, then 200 and 487; ``challenge``: 407 with a digest challenge,
    then 486 to an INVITE whose credentials are right, 403 to one whose are wrong). It keeps every request."""

    def __init__(self, answer: str, host: str = "127.0.0.1") -> None:
        self.answer = answer
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind((host, 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.uri = f"sip:+15551234567@{host}:{self.port}"
        self.requests: list[SipRequest] = []
        self.raw: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def methods(self) -> list[str]:
        return [request.method for request in self.requests]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.socket.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.raw.append(data)
            message = SipMessage.parse(data)
            if not isinstance(message, SipRequest):
                continue
            self.requests.append(message)
            if message.method == "INVITE":
                self._reply(message, addr, 100, "Trying")
                if self.answer == "challenge":
                    self._challenge(message, addr)
                elif self.answer == "busy":
                    self._reply(message, addr, 486, "Busy Here")
                else:
                    self._reply(message, addr, 180, "Ringing")
            elif message.method == "CANCEL":
                self._reply(message, addr, 200, "OK")
                invite = next(request for request in self.requests if request.method == "INVITE")
                self._reply(invite, addr, 487, "Request Terminated")

    def _challenge(self, invite: SipRequest, addr: tuple[str, int]) -> None:
        credentials = invite.headers.get_first("proxy-authorization")
        if not credentials:
            challenge = f'Digest realm="{TRUNK_REALM}", nonce="{TRUNK_NONCE}", algorithm=MD5, qop="auth"'
            self._reply(invite, addr, 407, "Proxy Authentication Required", f"Proxy-Authenticate: {challenge}")
            return
        fields = dict(re.findall(r'(\w+)="?([^",]*)"?', credentials))
        md5 = lambda text: hashlib.md5(text.encode()).hexdigest()  # noqa: E731
        ha1, ha2 = md5(f"{TRUNK_USER}:{TRUNK_REALM}:{TRUNK_PASSWORD}"), md5(f"INVITE:{fields.get('uri')}")
        expected = md5(f"{ha1}:{TRUNK_NONCE}:{fields.get('nc')}:{fields.get('cnonce')}:auth:{ha2}")
        right = fields.get("username") == TRUNK_USER and fields.get("response") == expected
        self._reply(invite, addr, *((486, "Busy Here") if right else (403, "Forbidden")))

    def _reply(self, request: SipRequest, addr: tuple[str, int], status: int, phrase: str, extra: str = "") -> None:
        lines = [f"SIP/2.0 {status} {phrase}", *([extra] if extra else [])]
        lines += [f"Via: {via}" for via in request.headers.get("via")]
        to = request.headers.get_first("to") or ""
        lines += [
            f"From: {request.headers.get_first('from')}",
            f"To: {to}" + (";tag=callee1" if status > 100 and ";tag=" not in to else ""),
            f"Call-ID: {request.call_id}",
            f"CSeq: {request.headers.get_first('cseq')}",
            "Content-Length: 0",
            "",
            "",
        ]
        self.socket.sendto("\r\n".join(lines).encode(), addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.socket.close()
