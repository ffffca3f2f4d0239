"""The server's microphone receiver lets each frame out as it completes (``hear_at_once``), not after
aiortc's 4-packet playout prefetch: two real aiortc peer connections on loopback, Opus both ways."""

from __future__ import annotations

import asyncio

import pytest
from aiortc import RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack

from realtime.transports.webrtc.media import MICROPHONE_PREFETCH, hear_at_once


@pytest.mark.asyncio
async def test_a_microphone_track_is_heard_frame_by_frame():
    caller, server = RTCPeerConnection(), RTCPeerConnection()
    caller.addTrack(AudioStreamTrack())  # 20 ms frames of silence, paced
    heard: list[object] = []
    tasks: list[asyncio.Future] = []
    got = asyncio.Event()

    @server.on("track")
    def on_track(track):
        for transceiver in server.getTransceivers():
            if transceiver.receiver.track is track:
                hear_at_once(transceiver.receiver)
                heard.append(transceiver.receiver)

        async def read() -> None:
            for _ in range(5):
                await track.recv()
            got.set()

        tasks.append(asyncio.ensure_future(read()))

    try:
        await caller.setLocalDescription(await caller.createOffer())
        await server.setRemoteDescription(caller.localDescription)
        await server.setLocalDescription(await server.createAnswer())
        await caller.setRemoteDescription(server.localDescription)
        await asyncio.wait_for(got.wait(), 30)
        (receiver,) = heard
        buffer = receiver._RTCRtpReceiver__jitter_buffer
        assert buffer._prefetch == MICROPHONE_PREFETCH == 1  # aiortc's own: 4
    finally:
        await caller.close()
        await server.close()
        for task in tasks:
            task.cancel()
