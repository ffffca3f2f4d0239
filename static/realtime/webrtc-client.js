// The WebRTC side, as OpenAI's GA flow has it: the microphone as an Opus track (with the browser's
// echo cancellation, noise suppression and gain control), the SDP offer POSTed to /v1/realtime/calls,
// JSON events on the "oai-events" data channel, and the answer played from the server's audio track.
// Same interface as RealtimeClient (send, close, open) so the page drives either.

const CONNECT_TIMEOUT_MS = 10000;
const HANG_UP_WAIT_MS = 2000;

// The microphone as the call sends it: the browser's echo cancellation, noise suppression and gain control.
function constraints(deviceId) {
  return {
    audio: {
      channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true,
      ...(deviceId ? { deviceId: { exact: deviceId } } : {}),
    },
  };
}

export function webrtcSupported() {
  return typeof RTCPeerConnection === "function" && !!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
}

// An error the page can act on: status (HTTP, or 0 when no answer came) and the server's error object.
// body: the server's answer, an `error` event as the WebSocket would have sent it.
export class CallError extends Error {
  constructor(message, status = 0, body = null) {
    super(message);
    this.name = "CallError";
    this.status = status;
    this.body = body && body.type === "error" ? body : null;
    this.error = (body && body.error) || null;
  }
}

// handlers: onOpen(), onEvent(event), onClose({code, reason}), onTrack(stream) (the answer's audio);
// iceServers from the page, if any.
export class WebRTCClient {
  constructor(callsUrl, secret, handlers, iceServers = []) {
    this.kind = "webrtc";
    this.callsUrl = callsUrl;
    this.secret = secret;
    this.handlers = handlers;
    this.sent = 0;
    this.location = null;
    this.session = null; // settings sent with the offer (a multipart form), or null: the plain SDP
    this.microphone = null; // the MediaStream, or null when the page has none (typing only)
    this.microphoneError = null;
    this.connectedAt = null; // performance.now() when media started flowing
    this.closed = false;
    this.pc = new RTCPeerConnection({ iceServers });
    this.channel = this.pc.createDataChannel("oai-events");
    this.audio = document.createElement("audio");
    this.audio.autoplay = true;
    this.pc.ontrack = (event) => {
      const stream = event.streams[0] || new MediaStream([event.track]);
      this.audio.srcObject = stream;
      this.audio.play().catch(() => {});
      if (handlers.onTrack) handlers.onTrack(stream);
    };
    this.channel.onmessage = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (error) {
        return;
      }
      handlers.onEvent(event);
    };
    this.channel.onclose = () => this.#ended("The call ended.");
    this.pc.onconnectionstatechange = () => {
      const state = this.pc.connectionState;
      if (state === "connected" && this.connectedAt === null) this.connectedAt = performance.now();
      if (state === "failed") this.#ended("The media connection failed (ICE).", 1006);
    };
  }

  // Opens the microphone (unless `microphone` is false: typing only, until addMicrophone()), offers, applies the
  // answer and waits for the data channel. Rejects with a CallError (status 429: every slot is busy;
  // 401/403: credentials; 0: no WebRTC path to the server).
  async start(deviceId = null, microphone = true) {
    if (!microphone) {
      this.microphoneError = null;
      this.pc.addTransceiver("audio", { direction: "sendrecv" }); // no track yet: addMicrophone() gives it one
    } else {
      try {
        this.microphone = await navigator.mediaDevices.getUserMedia(constraints(deviceId));
        for (const track of this.microphone.getAudioTracks()) this.pc.addTrack(track, this.microphone);
      } catch (error) {
        this.microphoneError = error;
        this.pc.addTransceiver("audio", { direction: "recvonly" }); // typing only: still hear the answers
      }
    }
    const offer = await this.pc.createOffer();
    await this.pc.setLocalDescription(offer);
    const { body, headers } = this.#offer(offer.sdp);
    if (this.secret) headers.Authorization = `Bearer ${this.secret}`;
    let response;
    try {
      response = await fetch(this.callsUrl, { method: "POST", body, headers, credentials: "same-origin" });
    } catch (error) {
      throw new CallError("Could not reach the server.");
    }
    if (response.status !== 201) {
      const body = await response.json().catch(() => ({}));
      throw new CallError((body.error && body.error.message) || `HTTP ${response.status}`, response.status, body);
    }
    this.location = response.headers.get("Location");
    await this.pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    await this.#opened();
    this.handlers.onOpen();
  }

  // The offer as plain SDP, or (with this.session set: the session's settings from the start) as OpenAI's
  // multipart form of `sdp` and `session`.
  #offer(sdp) {
    if (!this.session) return { body: sdp, headers: { "Content-Type": "application/sdp" } };
    const form = new FormData();
    form.append("sdp", sdp);
    form.append("session", JSON.stringify(this.session));
    return { body: form, headers: {} };
  }

  #opened() {
    if (this.channel.readyState === "open") return Promise.resolve();
    return new Promise((resolve, reject) => {
      const fail = () => reject(new CallError("The media connection did not come up."));
      const timer = setTimeout(fail, CONNECT_TIMEOUT_MS);
      this.channel.addEventListener("open", () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    });
  }

  get open() {
    return !this.closed && this.channel.readyState === "open";
  }

  send(event) {
    if (!this.open) return false;
    this.channel.send(JSON.stringify(event));
    this.sent += 1;
    return true;
  }

  setMuted(muted) {
    for (const track of this.microphone ? this.microphone.getAudioTracks() : []) track.enabled = !muted;
  }

  // A call started without the microphone: opens it now and sends it on the call's audio sender (nothing
  // renegotiated). Rejects as getUserMedia does; the call goes on, typing only.
  async addMicrophone(deviceId = null) {
    const transceiver = this.pc.getTransceivers().find((candidate) => candidate.receiver.track.kind === "audio");
    const stream = await navigator.mediaDevices.getUserMedia(constraints(deviceId));
    await transceiver.sender.replaceTrack(stream.getAudioTracks()[0]);
    this.microphone = stream;
  }

  // Switches to another microphone on the same call (the sender's track is replaced, nothing renegotiated).
  async useMicrophone(deviceId) {
    const sender = this.pc.getSenders().find((candidate) => candidate.track && candidate.track.kind === "audio");
    if (!sender || !this.microphone) return;
    const stream = await navigator.mediaDevices.getUserMedia(constraints(deviceId));
    const muted = !sender.track.enabled;
    await sender.replaceTrack(stream.getAudioTracks()[0]);
    for (const track of this.microphone.getTracks()) track.stop();
    this.microphone = stream;
    this.setMuted(muted);
  }

  // performance.now() at which the microphone captured the sample at `audioMs` of the call's audio:
  // the track streams in real time from the moment the connection is up.
  capturedAt(audioMs) {
    return this.connectedAt === null ? null : this.connectedAt + audioMs;
  }

  // What was received on the answer's track (for the page's figures and tests).
  async received() {
    const stats = await this.pc.getStats();
    for (const report of stats.values()) {
      if (report.type === "inbound-rtp" && report.kind === "audio") {
        return { samples: report.totalSamplesReceived || 0, energy: report.totalAudioEnergy || 0,
                 packets: report.packetsReceived || 0 };
      }
    }
    return { samples: 0, energy: 0, packets: 0 };
  }

  // Hangs up: DELETE first, and the peer connection closed once the server has answered (or after
  // HANG_UP_WAIT_MS). Closed first, the server would end the call from its side and answer the DELETE 404.
  close() {
    if (this.closed) return;
    this.closed = true;
    if (!this.location) {
      this.#stop();
      return;
    }
    const hangUp = fetch(this.location, { method: "DELETE", headers: this.#auth(), keepalive: true }).catch(() => {});
    const late = new Promise((resolve) => setTimeout(resolve, HANG_UP_WAIT_MS));
    Promise.race([hangUp, late]).then(() => this.#stop());
  }

  #auth() {
    return this.secret ? { Authorization: `Bearer ${this.secret}` } : {};
  }

  #stop() {
    for (const track of this.microphone ? this.microphone.getTracks() : []) track.stop();
    this.audio.srcObject = null;
    this.channel.close();
    this.pc.close();
  }

  #ended(reason, code = 1000) {
    if (this.closed) return;
    this.closed = true;
    this.#stop();
    this.handlers.onClose({ code, reason });
  }
}
