"""A real SIP phone for the tests: Debian's ``baresip``, speaking a WAV file and recording what it hears.

Each :class:`Baresip` runs its own process with its own configuration directory: the
microphone is ``aufile`` (the WAV, then silence), the received audio is dumped by ``sndfile``
as a WAV, and the phone is steered over ``ctrl_tcp`` (JSON netstrings: dial, hang up).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import wave
from pathlib import Path

import numpy as np

from tests.support.server import free_port, stop_process

MODULES = Path("/usr/lib/baresip/modules")


def available() -> bool:
    return shutil.which("baresip") is not None and (MODULES / "aufile.so").exists()


def write_wav(path: Path, samples: np.ndarray, rate: int = 8000) -> Path:
    """Float samples -> a mono PCM16 WAV (what ``aufile`` reads)."""
    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A mono PCM16 WAV, also one still being written (its header does not count the samples yet)."""
    data = path.read_bytes()
    fmt = data.find(b"fmt ")
    start = data.find(b"data")
    if fmt < 0 or start < 0:
        return np.zeros(0, dtype=np.float32), 8000
    rate = int.from_bytes(data[fmt + 12 : fmt + 16], "little")
    body = data[start + 8 :]
    pcm = np.frombuffer(body[: len(body) // 2 * 2], dtype="<i2")
    return pcm.astype(np.float32) / 32768.0, rate


class Baresip:
    """One phone: ``dial(uri)``, ``hang_up()``, ``heard()`` (what it received, as float samples)."""

    def __init__(
        self, home: Path, microphone: Path, codec: str = "PCMU", account: str = "", certificate: Path | None = None
    ) -> None:
        """``account``: parameters of its SIP account, e.g. ``;auth_pass=secret;mediaenc=srtp-mand``;
        ``certificate``: a PEM of a certificate and its key, with which the phone listens for SIP over TLS too (on
        its SIP port + 1)."""
        self.home = home
        self.home.mkdir(parents=True, exist_ok=True)
        self.ctrl_port = free_port()
        self.sip_port = free_port()
        self.microphone = microphone
        self.codec = codec
        self.account = account
        self.certificate = certificate
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = home / "baresip.log"

    def start(self, attempts: int = 3) -> Baresip:
        """Starts the phone; on a port another process took between choosing it and binding it (baresip also
        binds the SIP port + 1, for TLS, which nobody checked), again on new ports."""
        for attempt in range(attempts):
            try:
                return self._start()
            except RuntimeError:
                if attempt == attempts - 1 or "Address already in use" not in self.log():
                    raise
                self.ctrl_port, self.sip_port = free_port(), free_port()
        raise AssertionError("unreachable")

    def _start(self) -> Baresip:
        codecs = {"PCMU": "audio_codecs PCMU/8000", "PCMA": "audio_codecs PCMA/8000"}[self.codec]
        (self.home / "config").write_text(
            "\n".join(
                [
                    f"sip_listen 127.0.0.1:{self.sip_port}",
                    f"audio_source aufile,{self.microphone}",
                    "audio_player aubridge,none",
                    "audio_alert aubridge,none",
                    codecs,
                    "ausrc_srate 8000",
                    "auplay_srate 8000",
                    f"module_path {MODULES}",
                    "module g711.so",
                    "module aufile.so",
                    "module aubridge.so",
                    "module sndfile.so",
                    "module srtp.so",  # SDES SRTP, used only by an account with ;mediaenc=srtp...
                    "module ctrl_tcp.so",
                    "module_app account.so",
                    "module_app menu.so",
                    f"ctrl_tcp_listen 127.0.0.1:{self.ctrl_port}",
                    f"snd_path {self.home}",
                    "rtp_timeout 0",
                    *([f"sip_certificate {self.certificate}"] if self.certificate else []),
                    "",
                ]
            )
        )
        (self.home / "accounts").write_text(f"<sip:phone@127.0.0.1:{self.sip_port}>;regint=0{self.account}\n")
        with open(self.log_path, "wb") as log:  # baresip writes to its own copy of the file
            self.process = subprocess.Popen(
                ["baresip", "-f", str(self.home)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30  # a busy machine takes its time to start it
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"baresip exited at its start:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.ctrl_port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"baresip did not start:\n{self.log()}")

    def command(self, command: str, params: str = "") -> dict:
        """Runs one baresip command over ctrl_tcp and returns its JSON answer."""
        body = json.dumps({"command": command, "params": params, "token": "t"}).encode()
        with socket.create_connection(("127.0.0.1", self.ctrl_port), timeout=5) as conn:
            conn.sendall(f"{len(body)}:".encode() + body + b",")
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                data += conn.recv(65536)
                head, _, rest = data.partition(b":")
                if head.isdigit() and len(rest) > int(head):
                    for frame in _netstrings(data):
                        message = json.loads(frame)
                        if message.get("response"):
                            return message
        raise TimeoutError(f"no answer from baresip to {command}")

    def dial(self, uri: str) -> dict:
        return self.command("dial", uri)

    def hang_up(self) -> dict:
        return self.command("hangup")

    def hung_up(self) -> bool:
        """Whether the call is over at the phone (the server's BYE: "session closed"; its own: "terminated")."""
        log = self.log()
        return "session closed" in log or "terminated (duration" in log

    def heard(self) -> tuple[np.ndarray, int]:
        """What the phone received (its ``sndfile`` dump of the decoded stream)."""
        dumps = sorted(self.home.glob("dump-*-dec.wav"))
        if not dumps:
            return np.zeros(0, dtype=np.float32), 8000
        return read_wav(dumps[-1])

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_s=5)
            self.process = None


def _netstrings(data: bytes) -> list[bytes]:
    frames = []
    while data:
        head, sep, rest = data.partition(b":")
        if not sep or not head.isdigit() or len(rest) <= int(head):
            break
        size = int(head)
        frames.append(rest[:size])
        data = rest[size + 1 :]
    return frames
