"""A Realtime client over WebRTC (aiortc), as OpenAI's GA flow has it: SDP offer by HTTP, events on ``oai-events``.

Its microphone is a track that plays whatever the test queues, paced in real time
(silence otherwise); what the server plays back is decoded and kept as
(arrival time, RMS) per 20 ms frame, so tests can tell when reply audio came and stopped.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field

import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from pipelines import audio
from realtime.transports.webrtc.media import hear_at_once
from tests.support.client import Closed, RealtimeClient

RATE = 48000
FRAME = 960
LOUD_RMS = 0.02


class Microphone(MediaStreamTrack):
    """The client's microphone: queued samples in real time, silence between; ``mute()`` stops it sending at all."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = np.zeros(0, dtype=np.float32)
        self._next_at: float | None = None
        self._pts = 0
        self._muted = asyncio.Event()
        self.spoken_until: float | None = None  # when the last queued sample is due to have gone out

    def say(self, samples_24k: np.ndarray) -> float:
        """Queues 24 kHz speech; returns when (``time.monotonic``) it will have been sent."""
        samples = audio.resample(samples_24k.astype(np.float32), 24000, RATE)
        self._queue = np.concatenate([self._queue, samples])
        self.spoken_until = time.monotonic() + len(self._queue) / RATE
        return self.spoken_until

    def mute(self) -> None:
        self._muted.set()

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._muted.is_set():
            await asyncio.Event().wait()  # sends nothing, ever (the test of a silent peer)
        now = time.monotonic()
        if self._next_at is None or now - self._next_at > 0.02:
            self._next_at = now
        elif self._next_at > now:
            await asyncio.sleep(self._next_at - now)
        self._next_at += 0.02
        chunk, self._queue = self._queue[:FRAME], self._queue[FRAME:]
        chunk = np.concatenate([chunk, np.zeros(FRAME - len(chunk), dtype=np.float32)])
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update((np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes())
        frame.pts, frame.sample_rate, frame.time_base = self._pts, RATE, fractions.Fraction(1, RATE)
        self._pts += FRAME
        return frame


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def json(self) -> dict:
        return json.loads(self.body)


def post(
    url: str, body: bytes, content_type: str, token: str | None = None, method: str = "POST", timeout: float = 30
) -> Answer:
    headers = {"Content-Type": content_type} if content_type else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body if method == "POST" else None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), dict(exc.headers))


def multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return ("".join(parts) + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}"


class WebRTCClient:
    """One call to ``base_url``; ``events`` is a :class:`RealtimeClient` over its data channel."""

    def __init__(self, base_url: str, microphone: bool = True, frames_as_they_come: bool = False) -> None:
        """``frames_as_they_come``: the reply's frames are timed as each completes, as a browser's playout
        starts them on a clean link, not after the 4 packets (80 ms) aiortc's receiver holds first
        (the benchmarks; the server's microphone does the same, ``hear_at_once``)."""
        self.base_url = base_url
        self.frames_as_they_come = frames_as_they_come
        self.pc = RTCPeerConnection()
        self.microphone = Microphone()
        self.channel = self.pc.createDataChannel("oai-events")
        if microphone:
            self.pc.addTrack(self.microphone)
        else:  # typing only: hears the replies, sends no media
            self.pc.addTransceiver("audio", direction="recvonly")
        self.heard: list[tuple[float, float]] = []  # (arrival, RMS) of each frame played to us
        self.location = ""
        self.answer: Answer | None = None
        self._inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self._opened = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.channel.on("open", self._opened.set)
        self.channel.on("message", lambda message: self._inbox.put_nowait(message))
        self.channel.on("close", lambda: self._inbox.put_nowait(None))
        self.pc.on("track", self._on_track)
        self.events = RealtimeClient(self._recv, self._send)

    async def connect(
        self,
        token: str | None = None,
        session: dict | None = None,
        open_timeout: float = 15,
        path: str = "/v1/realtime/calls",
    ) -> Answer:
        """Offers (to ``path``: a translation's call is ``/v1/realtime/translations/calls``), and on 201 applies the
        answer and waits for the data channel; returns the HTTP answer."""
        await self.pc.setLocalDescription(await self.pc.createOffer())
        sdp = self.pc.localDescription.sdp
        if session is None:
            body, content_type = sdp.encode(), "application/sdp"
        else:
            body, content_type = multipart({"sdp": sdp, "session": json.dumps(session)})
        self.answer = await asyncio.to_thread(post, f"{self.base_url}{path}", body, content_type, token)
        if self.answer.status != 201:
            return self.answer
        self.location = self.answer.headers.get("Location", "")
        await self.pc.setRemoteDescription(RTCSessionDescription(self.answer.body.decode(), "answer"))
        await asyncio.wait_for(self._opened.wait(), open_timeout)
        return self.answer

    async def hang_up(self, token: str | None = None) -> Answer:
        return await asyncio.to_thread(post, self.base_url + self.location, b"", "", token, "DELETE")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()

    def loud(self, since: float = 0.0) -> list[float]:
        """Arrival times of the reply frames with sound in them."""
        return [at for at, rms in self.heard if rms > LOUD_RMS and at >= since]

    def _on_track(self, track: MediaStreamTrack) -> None:
        if self.frames_as_they_come:
            for transceiver in self.pc.getTransceivers():
                if transceiver.receiver.track is track:
                    hear_at_once(transceiver.receiver)
        self._tasks.append(asyncio.ensure_future(self._listen(track)))

    async def _listen(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            samples = frame.to_ndarray().astype(np.float32) / 32768.0
            self.heard.append((time.monotonic(), float(np.sqrt(np.mean(np.square(samples))))))

    async def _recv(self, timeout: float) -> str | None:
        try:
            message = await asyncio.wait_for(self._inbox.get(), timeout)
        except TimeoutError:
            return None
        if message is None:
            self._inbox.put_nowait(None)
            raise Closed(None, "data channel closed")
        return message

    async def _send(self, text: str) -> None:
        self.channel.send(text)
