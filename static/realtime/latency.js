// One latency definition, as the server's: from the end of the user's speech to the first
// reply audio. The page knows when it captured each sample it sent, so the server's
// speech_stopped audio_end_ms (a position in the audio it received) maps to a moment on
// the page's own clock; the figure ends when the first reply sample starts playing.

import { RATE } from "./audio.js";

const KEEP = 3000; // chunks remembered (two minutes of 40 ms chunks)

export class CaptureClock {
  constructor() {
    this.log = []; // [total samples sent after a chunk, performance.now() its last sample was captured]
  }

  // A chunk of `samples` was sent; its last sample was captured at `capturedAt` (performance.now()).
  sent(totalSamples, capturedAt) {
    this.log.push([totalSamples, capturedAt]);
    if (this.log.length > KEEP) this.log.splice(0, this.log.length - KEEP);
  }

  // performance.now() at which the sample at `audioMs` of the sent audio was captured, or null.
  capturedAt(audioMs) {
    const target = (audioMs * RATE) / 1000;
    const entry = this.log.find(([samples]) => samples >= target);
    if (!entry) return null;
    return entry[1] - ((entry[0] - target) * 1000) / RATE;
  }
}

// "server 487 ms: STT 120 ms · LM first token 310 ms · TTS first audio 95 ms", from the server's timings.
export function breakdownText(timing) {
  const parts = [];
  if (timing.stt_ms != null) parts.push(`STT ${timing.stt_ms} ms`);
  if (timing.lm_first_token_ms != null) parts.push(`LM first token ${timing.lm_first_token_ms} ms`);
  if (timing.tts_first_audio_ms != null) parts.push(`TTS first audio ${timing.tts_first_audio_ms} ms`);
  const stages = parts.join(" · ");
  if (timing.voice_to_voice_ms == null) return stages;
  return stages ? `server ${timing.voice_to_voice_ms} ms: ${stages}` : `server ${timing.voice_to_voice_ms} ms`;
}

// Reads what the server measured for one response (written just after response.done: a few tries).
export async function fetchTiming(urlTemplate, sessionId, responseId, tries = 5) {
  if (!urlTemplate || !sessionId) return null;
  const url = urlTemplate.replace("SESSION_ID", encodeURIComponent(sessionId));
  for (let attempt = 0; attempt < tries; attempt++) {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return null;
      const body = await response.json();
      const found = (body.responses || []).find((entry) => entry.response_id === responseId);
      if (found) return found;
    } catch (error) {
      return null;
    }
    await new Promise((resolve) => setTimeout(resolve, 300 * (attempt + 1)));
  }
  return null;
}
