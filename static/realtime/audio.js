// Microphone capture (through the AudioWorklet in capture-worklet.js) and playback of
// 24 kHz PCM16 with a small jitter buffer, both on one AudioContext at the device rate.

export const RATE = 24000;

export function base64FromBytes(bytes) {
  let binary = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

export function pcm16FromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length - (binary.length % 2));
  for (let i = 0; i < bytes.length; i++) bytes[i] = binary.charCodeAt(i);
  return new Int16Array(bytes.buffer);
}

// Says in plain words why the microphone could not be opened.
export function microphoneProblem(error) {
  const name = error && error.name;
  if (name === "NotAllowedError" || name === "SecurityError") return "Microphone permission was denied.";
  if (name === "NotFoundError" || name === "OverconstrainedError") return "No microphone was found.";
  if (name === "NotReadableError") return "The microphone is in use by another program.";
  if (name === "InsecureContext") return "The microphone needs a secure page (HTTPS or localhost).";
  return `The microphone could not be opened (${(error && error.message) || name || "unknown reason"}).`;
}

// Fills a <select> with the microphones (labels appear once permission is given); returns their labels.
export async function listMicrophones(select, selected) {
  const devices = (await navigator.mediaDevices.enumerateDevices()).filter((device) => device.kind === "audioinput");
  select.replaceChildren(...devices.map((device, index) => {
    const option = document.createElement("option");
    option.value = device.deviceId;
    option.textContent = device.label || `Microphone ${index + 1}`;
    return option;
  }));
  if (selected) select.value = selected;
  select.disabled = devices.length === 0;
  return devices.map((device) => device.label);
}

export class Microphone {
  // onChunk(Int16Array pcm24k, level, capturedAt) is called for every chunk (chunkMs long); capturedAt
  // is the performance.now() at which its last sample was captured.
  constructor(context, workletUrl, onChunk, chunkMs = 40) {
    this.context = context;
    this.workletUrl = workletUrl;
    this.onChunk = onChunk;
    this.chunkMs = chunkMs;
    this.stream = null;
    this.node = null;
    this.source = null;
  }

  // deviceId: a microphone from navigator.mediaDevices.enumerateDevices(), or null for the default.
  async start(deviceId = null) {
    if (!window.isSecureContext || !navigator.mediaDevices || !this.context.audioWorklet) {
      const error = new Error("insecure context");
      error.name = "InsecureContext";
      throw error;
    }
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: {
        channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true,
        ...(deviceId ? { deviceId: { exact: deviceId } } : {}),
      },
    });
    await this.context.audioWorklet.addModule(this.workletUrl);
    this.source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "s2s-capture", {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: "explicit",
      processorOptions: { chunkMs: this.chunkMs },
    });
    this.node.port.onmessage = (event) => {
      if (event.data.type !== "chunk") return;
      const lateMs = Math.max(0, (this.context.currentTime - event.data.at) * 1000);
      this.onChunk(new Int16Array(event.data.pcm), event.data.level, performance.now() - lateMs);
    };
    this.source.connect(this.node);
  }

  // The id of the microphone in use (what enumerateDevices calls it), or "".
  get deviceId() {
    const track = this.stream && this.stream.getAudioTracks()[0];
    return (track && track.getSettings().deviceId) || "";
  }

  setEnabled(enabled) {
    if (this.node) this.node.port.postMessage({ type: "enable", enabled });
  }

  stop() {
    if (this.source) this.source.disconnect();
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    if (this.stream) this.stream.getTracks().forEach((track) => track.stop());
    this.stream = this.node = this.source = null;
  }
}

// Schedules 24 kHz chunks back to back on the AudioContext clock. A new run of audio
// (the first chunk, or one after an underrun) starts jitterMs late, so that network
// jitter does not leave gaps. Knows how much of each item has actually been heard.
export class Player {
  constructor(context, { jitterMs = 80, onIdle = () => {}, onSamples = () => {} } = {}) {
    this.context = context;
    this.jitter = jitterMs / 1000;
    this.onIdle = onIdle;
    this.onSamples = onSamples; // (n) samples that finished playing
    this.gain = context.createGain();
    this.gain.connect(context.destination);
    this.live = new Set(); // scheduled sources not yet ended
    this.nextTime = 0;
    this.itemId = null;
    this.itemDoneSamples = 0; // samples of the current item whose sources have ended
    this.itemQueuedSamples = 0;
  }

  get playing() {
    return this.live.size > 0;
  }

  // Queues a chunk; returns the AudioContext time at which it starts.
  enqueue(itemId, pcm) {
    if (pcm.length === 0) return this.nextTime;
    if (itemId !== this.itemId) {
      this.itemId = itemId;
      this.itemDoneSamples = 0;
      this.itemQueuedSamples = 0;
    }
    const buffer = this.context.createBuffer(1, pcm.length, RATE);
    const samples = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.gain);
    const now = this.context.currentTime;
    if (this.nextTime < now + 0.005) this.nextTime = now + this.jitter; // first chunk or underrun
    const entry = { source, itemId, start: this.nextTime, samples: pcm.length, stoppedAt: null };
    source.onended = () => this.ended(entry);
    source.start(entry.start);
    this.live.add(entry);
    this.nextTime += pcm.length / RATE;
    this.itemQueuedSamples += pcm.length;
    return entry.start;
  }

  heard(entry, at) {
    return Math.max(0, Math.min(entry.samples, Math.round((at - entry.start) * RATE)));
  }

  ended(entry) {
    if (!this.live.delete(entry)) return;
    const played = entry.stoppedAt === null ? entry.samples : this.heard(entry, entry.stoppedAt);
    if (entry.itemId === this.itemId) this.itemDoneSamples += played;
    this.onSamples(played);
    if (this.live.size === 0) this.onIdle();
  }

  // Milliseconds of the current item heard so far.
  playedMs() {
    const now = this.context.currentTime;
    let samples = this.itemDoneSamples;
    for (const entry of this.live) if (entry.itemId === this.itemId) samples += this.heard(entry, now);
    return Math.floor((samples * 1000) / RATE);
  }

  // Stops at once; returns {itemId, audioEndMs} of what was heard of the current item.
  stop() {
    const now = this.context.currentTime;
    const heard = { itemId: this.itemId, audioEndMs: this.playedMs() };
    const entries = [...this.live];
    for (const entry of entries) {
      entry.stoppedAt = now;
      try {
        entry.source.stop();
      } catch (error) {
        // a source that was never started cannot be stopped; it is dropped below anyway
      }
      this.ended(entry);
    }
    this.nextTime = 0;
    return heard;
  }
}
