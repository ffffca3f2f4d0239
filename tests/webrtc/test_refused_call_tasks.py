"""A call that never becomes a session (a full pool, a refused offer) leaves no task of its own behind.

aiortc announces the offer's microphone track while the offer is applied, before any unit is claimed, and the
call starts reading it at once; a refused call must stop that reader, or asyncio reports a task destroyed while
pending when the call is collected ("Task was destroyed but it is pending! ... _pump_microphone").
"""

from __future__ import annotations

import asyncio

from aiortc import RTCPeerConnection

from realtime.transports.webrtc.call import WebRTCCall
from tests.support.webrtc_client import Microphone


async def microphone_offer() -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection()
    pc.createDataChannel("oai-events")
    pc.addTrack(Microphone())
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def test_a_discarded_call_stops_reading_the_microphone_track_it_was_offered():
    client, sdp = await microphone_offer()
    call = WebRTCCall("rtc_refused", runtime=None)  # type: ignore[arg-type]  # never answered: no runtime needed
    try:
        await call.accept_offer(sdp)
        await asyncio.sleep(0)  # the track's reader starts
        readers = [task for task in call._tasks if task.get_name().startswith("microphone-")]
        assert readers, "aiortc announced no track: this test would prove nothing"
        await call.discard()
        await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 5)
        assert all(task.done() for task in readers)
        assert not call._tasks
    finally:
        await client.close()
