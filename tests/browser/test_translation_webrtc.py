"""A translation session over WebRTC from headless Chromium, as OpenAI's guide writes it (issue 55): the
microphone (a WAV file) on a track, the SDP offer to ``POST /v1/realtime/translations/calls``, the translation's
events on ``oai-events``, its speech on the answer's track (loopback profile: the FAKE translator says how long
each phrase was, its voice is a tone)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import write_microphone_wav

pytestmark = pytest.mark.browser

# The guide's browser code, with what it saw returned: the events' types, the translated text, and how much sound
# the answer's track brought (WebRTC's own inbound statistics).
GUIDE = """async () => {
  const pc = new RTCPeerConnection();
  const seen = { types: [], translation: "", source: "", energy: 0, errors: [] };
  let remote = null;
  pc.ontrack = (event) => {  // played, as the guide's audio element does: Chromium measures what it plays
    remote = event.track;
    const player = new Audio();
    player.srcObject = new MediaStream([event.track]);
    player.play();
  };
  const microphone = await navigator.mediaDevices.getUserMedia({ audio: true });
  pc.addTrack(microphone.getAudioTracks()[0], microphone);
  const events = pc.createDataChannel("oai-events");
  const done = new Promise((resolve) => {
    events.onmessage = (message) => {
      const event = JSON.parse(message.data);
      seen.types.push(event.type);
      if (event.type === "session.created") {
        events.send(JSON.stringify({ type: "session.update",
          session: { audio: { input: { transcription: { model: "gpt-4o-transcribe" } } } } }));
      }
      if (event.type === "session.input_transcript.delta") seen.source += event.delta;
      if (event.type === "session.output_transcript.delta") { seen.translation += event.delta; resolve(); }
      if (event.type === "error") seen.errors.push(event.error.message);
    };
  });
  await pc.setLocalDescription(await pc.createOffer());
  const answer = await fetch("/v1/realtime/translations/calls", {
    method: "POST", body: pc.localDescription.sdp, headers: { "Content-Type": "application/sdp" },
  });
  seen.status = answer.status;
  seen.location = answer.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await answer.text() });
  await Promise.race([done, new Promise((resolve) => setTimeout(resolve, 30000))]);
  await new Promise((resolve) => setTimeout(resolve, 1500));  // the phrase's speech on the track
  (await pc.getStats()).forEach((report) => {
    if (report.type === "inbound-rtp" && report.kind === "audio") seen.energy = report.totalAudioEnergy || 0;
  });
  seen.remote = remote !== null;
  const hangUp = await fetch(seen.location, { method: "DELETE" });
  seen.hungUp = hangUp.status;
  pc.close();
  return seen;
}"""


def test_chromium_translates_its_microphone_over_webrtc_as_the_guide_has_it(loopback_server, open_page, tmp_path):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["The cat is in the house."], tail_s=4.0)
    client = open_page(loopback_server.http + "/", microphone=wav)
    seen = client.page.evaluate(GUIDE)
    assert seen["status"] == 201 and seen["location"].startswith("/v1/realtime/calls/rtc_"), seen
    assert seen["types"][0] == "session.created" and "session.updated" in seen["types"], seen
    assert seen["translation"].startswith("audio of "), seen  # the FAKE translator: the phrase's length
    assert seen["source"].startswith("audio de "), seen  # its source transcript, asked for
    assert "session.output_audio.delta" not in seen["types"], seen  # the speech rides the track
    assert seen["remote"] and seen["energy"] > 0, seen
    assert seen["hungUp"] == 204 and not seen["errors"], seen
    assert client.errors == []
