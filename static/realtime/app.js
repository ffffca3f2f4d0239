// The page: connects to /v1/realtime, streams the microphone, plays the answers, shows both
// sides as a chat with their latency, and exposes what it did in window.s2sStats for tests.

import { Microphone, Player, base64FromBytes, listMicrophones, microphoneProblem, pcm16FromBase64 } from "./audio.js";
import { Chat } from "./chat.js";
import { EventLog } from "./eventlog.js";
import { CaptureClock, breakdownText, fetchTiming } from "./latency.js";
import { RealtimeClient, fetchClientSecret, realtimeUrl } from "./realtime-client.js";
import {
  forgetSettings, restoreConnection, restoreSettings, saveConnection, saveSettings, savedSettings, settingsSession,
  settingsStatus, showEcho, showPending, showPushToTalk, showSettings, showSpeed, showTurnOptions, turnDetection,
} from "./settings.js";
import { WebRTCClient, webrtcSupported } from "./webrtc-client.js";

const root = document.getElementById("app");
const $ = (id) => document.getElementById(id);
const chat = new Chat($("chat"), () => {
  root.dataset.empty = String(chat.empty);
});
const eventLog = new EventLog($("events"), $("event-count"));
const DEFAULTS = JSON.parse($("session-defaults").textContent); // the session a new connection gets

const RETRY_S = 5;
const BUSY = `All slots are busy. Trying again every ${RETRY_S} s.`; // said once: the countdown is not a live region
const APPLY_AFTER_MS = 400; // a change in the settings is sent once the person has stopped changing them
const SENDING_LATER = "Connecting to send your message…";
const MIN_TURN_SAMPLES = 2400; // 100 ms: the least audio the server accepts in a commit
const LABELS = {
  disconnected: "Not connected",
  connecting: "Connecting…",
  listening: "Listening",
  thinking: "Thinking…",
  speaking: "Speaking",
  busy: BUSY,
  error: "Disconnected",
};
const ERROR_WORDS = {
  server_not_ready: "The server is still loading its models. Try again in a minute.",
  invalid_api_key: "The server did not accept this page's credentials. Reload the page and try again.",
  response_failed: "The assistant could not answer that. Please try again.",
  conversation_already_has_active_response: "The assistant is still answering. Wait for it to finish.",
  input_audio_buffer_commit_empty: "There was no speech to send.",
};
const FATAL = new Set(["session_limit_reached", "server_not_ready", "invalid_api_key", "session_ended_by_admin"]);
const CLOSE_WORDS = {
  1001: "The server is restarting. Connect again in a moment.",
  1006: "Lost the connection to the server.",
  1011: "The server hit an internal error and ended the session. Connect again.",
  1013: "The server is not ready yet. Try again shortly.",
};
const INCOMPLETE_WORDS = {
  max_output_tokens: "cut short: the answer reached its length limit",
  content_filter: "cut short by a filter",
};

const stats = {
  state: "disconnected",
  playedSamples: 0,
  sentSamples: 0,
  events: {}, // server event type -> count
  sent: {}, // client event type -> count
  latencies: [], // one per answered turn: {itemId, responseId, kind, ms, server}
  truncations: [], // {itemId, audioEndMs}
  errors: [], // plain-words messages shown
  microphone: "off", // off | on | unavailable
  microphones: [], // labels of the microphones offered
  muted: false,
  pushToTalk: false,
  retries: 0, // automatic reconnections after a full pool
  indicated: { user: 0, assistant: 0 }, // how often "you are speaking" / "assistant speaking" came on
  sessionId: null,
  clientSecret: null, // how the last connection authenticated: "used", "not offered", "none (HTTP 404)"
  transport: null, // "webrtc" (the default where the browser has it) or "websocket" (the fallback)
  fallback: null, // why WebRTC was not used, when it was not
  received: null, // WebRTC: {samples, energy, packets} of the answer track
};
window.s2sStats = stats;

let link = null; // the live connection and its audio, or null
let settingsDirty = false;
let pendingText = null; // {text, typed}: an example prompt chosen, or a message typed, before connecting
let sessions = 0; // sessions opened since the page loaded: the chat marks where each new one starts
let retry = null; // {timer, left} while a full pool is retried
let microphoneWanted = true; // false: connected to send a typed message or an example, until the person asks
let applyTimer = null; // a settings change waiting to be sent

function setState(state, text) {
  stats.state = state;
  root.dataset.state = state;
  let label = text || LABELS[state];
  if (state === "listening" && stats.microphone !== "on") label = "Ready: type a message";
  if (state === "listening" && stats.microphone === "on" && stats.muted) label = "Listening (microphone muted)";
  if ($("status-text").textContent !== label) $("status-text").textContent = label; // a live region: said once
  $("transport").hidden = !link || !root.dataset.transport; // how a connection runs, only while there is one
  $("connect").textContent = link ? "Disconnect" : state === "busy" ? "Try again now" : "Connect";
  $("stop-retry").hidden = state !== "busy";
  $("retry-in").hidden = state !== "busy";
}

function showAlert(message) {
  stats.errors.push(message);
  $("alert").textContent = message;
  $("alert").hidden = false;
}

function clearAlert() {
  $("alert").hidden = true;
  $("alert").textContent = "";
}

function notice(message) {
  $("notice").textContent = message;
}

function count(table, type) {
  table[type] = (table[type] || 0) + 1;
}

function send(event) {
  if (!link || !link.client || !link.client.send(event)) return false;
  count(stats.sent, event.type);
  eventLog.add("out", event);
  return true;
}

function setSpeaking(who, speaking) {
  const key = who === "user" ? "userSpeaking" : "assistantSpeaking";
  if (speaking && root.dataset[key] !== "true") stats.indicated[who] += 1;
  root.dataset[key] = String(speaking);
}

// --- connecting and the full pool -------------------------------------------------------

// fromRetry: the page tries again after a full pool (the one message about it stays up).
// microphone: false when a typed message or an example connects: the microphone opens only when asked.
async function connect(fromRetry = false, microphone = true) {
  if (!fromRetry) {
    stopRetry();
    clearAlert();
    microphoneWanted = microphone;
  }
  notice("");
  if (root.dataset.signInUrl) {
    showAlert("This server requires you to sign in before you can connect. Use the Sign in link above.");
    setState("error", "Sign in first");
    return;
  }
  stats.sessionId = null; // until this connection's session.created
  const context = new AudioContext({ latencyHint: "interactive" }); // created in the click: allowed to play
  link = {
    context, client: null, mic: null, player: null, closing: false,
    fatal: null, // the error event that explains an upcoming close
    activeResponse: null, // id of the response between response.created and response.done
    firstAudio: new Set(), // responses whose first audio was scheduled
    truncated: new Set(), // assistant items cut short by the user
    wantResponse: false, // a response.create waits for the active response to end
    turn: null, // {speechEndAt, kind} of the turn waiting for its answer
    clock: new CaptureClock(),
    talking: false, // push-to-talk: the talk button is held
    talkStart: 0, // sentSamples when it was pressed
    talkStartedAt: 0, // performance.now() when it was pressed
    remotePlaying: null, // WebRTC: the response whose audio the server is playing
    responseItems: new Map(), // response id -> its assistant item id
  };
  link.player = new Player(context, {
    onSamples: (n) => {
      stats.playedSamples += n;
      root.dataset.playedSamples = String(stats.playedSamples);
    },
    onIdle: () => {
      setSpeaking("assistant", false);
      if (link && stats.state === "speaking") setState(link.activeResponse ? "thinking" : "listening");
    },
  });
  const current = link;
  if (!fromRetry) setState("connecting"); // a retry leaves the full pool's one message as it is
  context.resume().catch(() => {});
  const slots = await slotStatus();
  if (link !== current) return; // disconnected while waiting
  if (slots === "full") {
    teardown();
    busy();
    return;
  }
  if (slots === "warming" || slots === "starting" || slots === "failed") {
    teardown();
    stopRetry();
    showAlert(ERROR_WORDS.server_not_ready);
    setState("error");
    return;
  }
  let secret = null;
  try {
    const answer = await fetchClientSecret(root.dataset.clientSecretsUrl, root.dataset.csrfToken);
    secret = answer.secret;
    stats.clientSecret = answer.status;
  } catch (error) {
    if (link !== current) return;
    teardown();
    showAlert(error.message);
    setState("error");
    return;
  }
  if (link !== current) return; // disconnected while waiting
  if (await connectWebRTC(current, secret)) return;
  if (link !== current) return;
  if (secret) secret = (await fetchClientSecret(root.dataset.clientSecretsUrl, root.dataset.csrfToken).catch(() => ({}))).secret;
  if (link !== current) return;
  setTransport("websocket");
  current.client = new RealtimeClient(realtimeUrl(root.dataset.realtimePath), secret, {
    onOpen: () => {},
    onEvent: (event) => link === current && onEvent(event),
    onClose: (close) => link === current && onClose(close),
  });
}

// Whether a session can be had now ("ready", "full", "warming", ...), or null when the server does not say.
// Asked before every try: a full pool is waited out without an offer the server must refuse (a 429 that the
// browser would log as an error each time).
async function slotStatus() {
  if (!root.dataset.slotsUrl) return null;
  try {
    const response = await fetch(root.dataset.slotsUrl, { credentials: "same-origin", cache: "no-store" });
    return response.ok ? (await response.json()).status : null;
  } catch (error) {
    return null;
  }
}

// --- WebRTC first, the WebSocket as the fallback ----------------------------------------

function setTransport(kind) {
  stats.transport = kind;
  root.dataset.transport = kind;
  $("transport").textContent = kind === "webrtc" ? "via WebRTC" : "via WebSocket";
  $("transport").hidden = false;
  showConnection();
}

function webrtcOffered() {
  return webrtcSupported() && !!root.dataset.callsUrl;
}

function wantWebRTC() {
  return webrtcOffered() && $("connection").value === "webrtc";
}

// Under the connection's choice: what this session runs over, and whether a change waits for the next Connect.
function showConnection() {
  const chosen = $("connection").value;
  const help = $("connection-help");
  if (link && stats.transport && stats.transport !== chosen) {
    help.textContent = `Not applied yet: this session runs over ${stats.transport === "webrtc" ? "WebRTC" : "a WebSocket"}; `
      + "the next Connect takes your choice.";
    help.dataset.pending = "true";
  } else {
    help.textContent = "Taken when you connect.";
    help.dataset.pending = "false";
  }
}

// True when the call is up, or when the page has already said why it cannot connect; false: use the WebSocket.
async function connectWebRTC(current, secret) {
  if (!wantWebRTC()) {
    stats.fallback = webrtcOffered() ? "asked for the WebSocket" : "this browser has no WebRTC";
    return false;
  }
  const client = new WebRTCClient(root.dataset.callsUrl, secret, {
    onOpen: () => {},
    onEvent: (event) => link === current && onEvent(event),
    onClose: (close) => link === current && current.client === client && onClose(close),
    onTrack: (stream) => tapAnswer(current, stream),
  }, JSON.parse(root.dataset.iceServers || "[]"));
  current.client = client;
  setTransport("webrtc");
  try {
    await client.start($("microphone-select").value || null, microphoneWanted);
    return true;
  } catch (error) {
    client.close();
    if (link !== current) return true;
    current.client = null;
    if (error.body) onEvent(error.body); // the error event the WebSocket would have sent
    if (error.status === 429) {
      teardown();
      busy();
      return true;
    }
    if ([401, 403, 503].includes(error.status)) {
      teardown();
      showAlert(ERROR_WORDS[error.error && error.error.code] || error.message);
      setState("error");
      return true;
    }
    stats.fallback = error.message;
    notice(`WebRTC is not available here (${error.message}): using a WebSocket.`);
    return false;
  }
}

// Counts the answer's audible samples as they play from the call's track (what playedSamples means
// over the WebSocket too), with the same worklet that captures the microphone.
async function tapAnswer(current, stream) {
  await current.context.audioWorklet.addModule(root.dataset.workletUrl);
  if (link !== current) return;
  const node = new AudioWorkletNode(current.context, "s2s-capture", {
    numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
    processorOptions: { chunkMs: 20 },
  });
  node.port.onmessage = (event) => {
    if (link !== current || event.data.type !== "chunk" || event.data.level < 0.003) return;
    stats.playedSamples += event.data.pcm.byteLength / 2;
    root.dataset.playedSamples = String(stats.playedSamples);
  };
  current.context.createMediaStreamSource(stream).connect(node);
}

// The call's microphone is its track: show its level, honour mute and push-to-talk.
function useCallMicrophone(current) {
  const client = current.client;
  if (!client.microphone) {
    stats.microphone = "unavailable";
    root.dataset.microphone = "unavailable";
    notice(`${microphoneProblem(client.microphoneError)} You can still type messages.`);
    return;
  }
  stats.microphone = "on";
  root.dataset.microphone = "on";
  client.setMuted(stats.muted || stats.pushToTalk);
  const analyser = current.context.createAnalyser();
  analyser.fftSize = 1024;
  current.context.createMediaStreamSource(client.microphone).connect(analyser);
  const data = new Float32Array(analyser.fftSize);
  const tick = () => {
    if (link !== current) return;
    analyser.getFloatTimeDomainData(data);
    const level = Math.sqrt(data.reduce((sum, v) => sum + v * v, 0) / data.length);
    $("level").value = !stats.muted && (!stats.pushToTalk || current.talking) ? Math.min(1, level * 4) : 0;
    setTimeout(tick, 100);
  };
  tick();
  if (stats.state === "listening") setState("listening");
  listMicrophones($("microphone-select"), client.microphone.getAudioTracks()[0].getSettings().deviceId)
    .then((labels) => { stats.microphones = labels; });
}

// The answer is playing: from the page's player (WebSocket) or the call's track (WebRTC).
function answerPlaying() {
  return link.player.playing || !!link.remotePlaying;
}

// Stops the answer the user talks or types over.
function stopAnswer() {
  if (link.player.playing) interrupt();
  else if (link.remotePlaying) send({ type: "output_audio_buffer.clear" });
}

function onRemoteAudio(event) {
  link.remotePlaying = event.response_id;
  if (!link.firstAudio.has(event.response_id)) {
    link.firstAudio.add(event.response_id);
    recordLatency(link.responseItems.get(event.response_id), event.response_id, performance.now());
  }
  setSpeaking("assistant", true);
  if (stats.state !== "speaking") setState("speaking");
}

function onRemoteIdle() {
  link.remotePlaying = null;
  setSpeaking("assistant", false);
  if (stats.state === "speaking") setState(link.activeResponse ? "thinking" : "listening");
  const current = link;
  current.client.received().then((received) => {
    if (link === current) stats.received = received;
  });
}

function disconnect() {
  pendingText = null;
  if (!link) return;
  link.closing = true;
  link.client && link.client.close();
  teardown();
  setState("disconnected");
}

function teardown() {
  const old = link;
  link = null;
  setSpeaking("user", false);
  setSpeaking("assistant", false);
  if (!old) return;
  delete root.dataset.transport;
  if (old.mic) old.mic.stop();
  old.player.stop();
  old.context.close().catch(() => {});
  stats.microphone = "off";
  root.dataset.microphone = "off";
  $("microphone-on").hidden = true;
  showEcho(null);
  showConnection();
  $("level").value = 0;
  $("microphone-select").disabled = true;
}

// Every slot is taken: said once, politely, in the status line; then the page tries again by itself, with a
// countdown beside Stop trying that no screen reader reads out each second.
function busy() {
  if (!retry) {
    stats.errors.push(BUSY);
    retry = { timer: null, left: RETRY_S };
  } else {
    retry.left = RETRY_S;
  }
  setState("busy");
  const tick = () => {
    if (!retry) return;
    if (retry.left <= 0) {
      stats.retries += 1;
      retry.timer = null;
      connect(true).catch(() => {});
      return;
    }
    $("retry-in").textContent = `next try in ${retry.left} s`;
    retry.left -= 1;
    retry.timer = setTimeout(tick, 1000);
  };
  tick();
}

function stopRetry() {
  if (retry && retry.timer) clearTimeout(retry.timer);
  retry = null;
}

// "Stop trying": the countdown ends and the page waits for the user to press Connect.
function giveUpRetry() {
  pendingText = null;
  stopRetry();
  clearAlert();
  notice("Stopped trying. Press Connect when you want to try again.");
  setState("disconnected");
}

function onClose({ code, reason }) {
  const closing = link.closing;
  const fatal = link.fatal;
  teardown();
  if (closing) return setState("disconnected");
  if (fatal && fatal.code === "session_limit_reached") return busy();
  retry = null;
  if (fatal && fatal.code === "session_ended_by_admin") {
    showAlert("An administrator ended this session.");
    return setState("error", "Ended by an administrator");
  }
  if (fatal) return setState("error");
  let message = CLOSE_WORDS[code];
  if (!message && code === 1008) message = `The server refused the session${reason ? `: ${reason}` : ""}.`;
  if (!message) message = `The server ended the session${reason ? `: ${reason}` : ""}.`;
  showAlert(message);
  setState("error");
}

// --- the microphone: picker, mute, push-to-talk ---------------------------------------------

async function startMicrophone(current, deviceId = null) {
  const mic = new Microphone(current.context, root.dataset.workletUrl, (pcm, level, at) => onChunk(current, pcm, level, at));
  try {
    await mic.start(deviceId);
  } catch (error) {
    mic.stop();
    if (link !== current) return;
    stats.microphone = "unavailable";
    root.dataset.microphone = "unavailable";
    notice(`${microphoneProblem(error)} You can still type messages.`);
    if (stats.state === "listening") setState("listening");
    return;
  }
  if (link !== current) return mic.stop();
  if (current.mic) current.mic.stop();
  current.mic = mic;
  stats.microphone = "on";
  root.dataset.microphone = "on";
  if (stats.state === "listening") setState("listening");
  stats.microphones = await listMicrophones($("microphone-select"), mic.deviceId);
  stats.microphoneInUse = mic.deviceId;
}

function onChunk(current, pcm, level, capturedAt) {
  if (link !== current) return;
  const open = !stats.muted && (!stats.pushToTalk || current.talking);
  $("level").value = open ? Math.min(1, level * 4) : 0;
  if (!open || !send({ type: "input_audio_buffer.append", audio: base64FromBytes(new Uint8Array(pcm.buffer)) })) return;
  stats.sentSamples += pcm.length;
  current.clock.sent(stats.sentSamples, capturedAt);
}

function setMuted(muted) {
  stats.muted = muted;
  $("mute").setAttribute("aria-pressed", String(muted));
  $("mute").textContent = muted ? "Unmute" : "Mute";
  if (muted) setSpeaking("user", false);
  if (link && link.client && link.client.kind === "webrtc") link.client.setMuted(muted || (stats.pushToTalk && !link.talking));
  if (stats.state === "listening") setState("listening");
}

function setPushToTalk(on) {
  stats.pushToTalk = on;
  $("talk").hidden = !on;
  showPushToTalk(on);
  if (link && link.talking) endTalk();
  if (link && link.client && link.client.kind === "webrtc") link.client.setMuted(stats.muted || on);
  send({ type: "session.update", session: { type: "realtime", audio: { input: { turn_detection: turnDetection(on) } } } });
}

function startTalk() {
  if (!link || !stats.pushToTalk || link.talking || stats.muted) return;
  stopAnswer();
  if (link.activeResponse) send({ type: "response.cancel" });
  link.talking = true;
  link.talkStart = stats.sentSamples;
  link.talkStartedAt = performance.now();
  if (link.client.kind === "webrtc") {
    send({ type: "input_audio_buffer.clear" }); // what the muted track carried meanwhile
    link.client.setMuted(false);
  }
  $("talk").classList.add("held");
  setSpeaking("user", true);
}

function endTalk() {
  if (!link || !link.talking) return;
  link.talking = false;
  $("talk").classList.remove("held");
  setSpeaking("user", false);
  const webrtc = link.client.kind === "webrtc";
  if (webrtc) link.client.setMuted(true);
  const held = webrtc ? ((performance.now() - link.talkStartedAt) * 24000) / 1000 : stats.sentSamples - link.talkStart;
  if (held < MIN_TURN_SAMPLES) {
    send({ type: "input_audio_buffer.clear" });
    return;
  }
  send({ type: "input_audio_buffer.commit" });
  link.turn = { speechEndAt: performance.now(), kind: "voice" };
  send({ type: "response.create" });
  setState("thinking");
}

// --- server events ------------------------------------------------------------------

function onEvent(event) {
  const type = event.type || "unknown";
  count(stats.events, type);
  eventLog.add("in", event);
  const handler = HANDLERS[type];
  if (handler) handler(event);
}

const HANDLERS = {
  "session.created": (event) => {
    retry = null;
    clearAlert();
    stats.sessionId = event.session.id;
    sessions += 1;
    if (sessions > 1 && !chat.empty) chat.divider("New session: the assistant does not remember the conversation above.");
    setState("listening");
    showEcho(event.session);
    if (settingsDirty || stats.pushToTalk || savedSettings()) sendSettings(); // what this person set, again
    else showSettings(event.session);
    if (!microphoneWanted) $("microphone-on").hidden = false; // typed: the microphone waits to be asked for
    else if (link.client.kind === "webrtc") useCallMicrophone(link);
    else startMicrophone(link);
    if (pendingText) {
      const { text, typed } = pendingText;
      pendingText = null;
      if ($("notice").textContent === SENDING_LATER) notice("");
      if (sendText(text) && typed && $("message").value.trim() === text) $("message").value = "";
    }
  },
  "session.updated": (event) => {
    settingsDirty = false;
    showPending(false);
    showSettings(event.session);
    showEcho(event.session);
    settingsStatus("Settings applied.", true);
  },
  error: (event) => onError(event.error || {}),
  "input_audio_buffer.speech_started": () => {
    setSpeaking("user", true);
    if (link.player.playing) interrupt();
  },
  "input_audio_buffer.speech_stopped": (event) => {
    setSpeaking("user", false);
    const clock = link.client.kind === "webrtc" ? link.client : link.clock;
    const speechEndAt = clock.capturedAt(event.audio_end_ms);
    link.turn = { speechEndAt: speechEndAt ?? performance.now(), kind: "voice" };
    setState("thinking");
  },
  "conversation.item.added": (event) => {
    const item = event.item || {};
    if (item.type !== "message" || chat.has(item.id)) return;
    if (item.role === "user" || item.role === "assistant") chat.entry(item.id, item.role);
    const part = (item.content || [])[0];
    if (part && (part.text || part.transcript)) chat.set(item.id, item.role, part.text || part.transcript);
  },
  "conversation.item.input_audio_transcription.delta": (event) => chat.append(event.item_id, "user", event.delta),
  "conversation.item.input_audio_transcription.completed": (event) => chat.set(event.item_id, "user", event.transcript),
  "conversation.item.input_audio_transcription.failed": (event) => {
    chat.set(event.item_id, "user", "(could not make out what you said)");
  },
  "response.created": (event) => {
    link.activeResponse = event.response.id;
    if (stats.state !== "speaking") setState("thinking");
  },
  "response.output_item.added": (event) => {
    link.responseItems.set(event.response_id, event.item.id);
    chat.entry(event.item.id, "assistant");
  },
  "output_audio_buffer.started": onRemoteAudio,
  "output_audio_buffer.stopped": onRemoteIdle,
  "output_audio_buffer.cleared": onRemoteIdle,
  "response.output_audio_transcript.delta": (event) => chat.append(event.item_id, "assistant", event.delta),
  "response.output_text.delta": (event) => chat.append(event.item_id, "assistant", event.delta),
  "response.output_audio.delta": onAudio,
  "response.output_audio_transcript.done": (event) => chat.finish(event.item_id),
  "response.output_text.done": (event) => chat.finish(event.item_id),
  "response.done": onResponseDone,
  "conversation.item.truncated": (event) => {
    if (link.client.kind === "webrtc" && !link.truncated.has(event.item_id)) { // the server cut what it played
      link.truncated.add(event.item_id);
      stats.truncations.push({ itemId: event.item_id, audioEndMs: event.audio_end_ms });
    }
    chat.note(event.item_id, `interrupted after ${(event.audio_end_ms / 1000).toFixed(1)} s`, { truncated: "true" });
  },
};

function onResponseDone(event) {
  const response = event.response || {};
  if (link.activeResponse === response.id) link.activeResponse = null;
  const item = (response.output || [])[0];
  const details = response.status_details || {};
  if (item && response.status === "cancelled" && !link.truncated.has(item.id)) {
    chat.note(item.id, "interrupted", { status: "cancelled" });
  } else if (item && response.status === "incomplete") {
    chat.note(item.id, INCOMPLETE_WORDS[details.reason] || `cut short (${details.reason || "incomplete"})`, { status: "incomplete" });
  }
  showServerTiming(response.id);
  if (link.wantResponse) {
    link.wantResponse = false;
    send({ type: "response.create" });
  } else if (!answerPlaying() && stats.state !== "listening") {
    setState("listening");
  }
}

function onAudio(event) {
  if (link.truncated.has(event.item_id)) return; // still in flight when the user cut in
  const pcm = pcm16FromBase64(event.delta);
  const start = link.player.enqueue(event.item_id, pcm);
  if (!link.firstAudio.has(event.response_id)) {
    link.firstAudio.add(event.response_id);
    const playsAt = performance.now() + Math.max(0, start - link.context.currentTime) * 1000;
    recordLatency(event.item_id, event.response_id, playsAt);
  }
  setSpeaking("assistant", true);
  if (stats.state !== "speaking") setState("speaking");
}

// From the end of the user's speech (or the typed message) to the first answer audio played.
function recordLatency(itemId, responseId, playsAt) {
  const turn = link.turn;
  link.turn = null;
  if (!turn) return;
  const ms = Math.round(playsAt - turn.speechEndAt);
  stats.latencies.push({ itemId, responseId, kind: turn.kind, ms, server: null });
  const label = turn.kind === "voice" ? "end of speech to audio" : "message to audio";
  chat.note(itemId, `${label} ${ms} ms`, { latencyMs: String(ms) });
  $("latency-summary").textContent = `Last answer: ${ms} ms from the ${turn.kind === "voice" ? "end of your speech" : "message"} to the first audio`;
  $("latency-breakdown").textContent = "";
  root.dataset.latencyMs = String(ms);
}

// The server's own measurement of the same turn, with its breakdown by stage.
async function showServerTiming(responseId) {
  const entry = stats.latencies.find((latency) => latency.responseId === responseId);
  if (!entry) return;
  const timing = await fetchTiming(root.dataset.timingsUrl, stats.sessionId, responseId);
  if (!timing) return;
  entry.server = timing;
  const text = breakdownText(timing);
  if (entry === stats.latencies[stats.latencies.length - 1]) $("latency-breakdown").textContent = text;
  chat.note(entry.itemId, text, { serverMs: String(timing.voice_to_voice_ms ?? "") });
}

// The user spoke over the answer: stop playback now and tell the server what was heard.
function interrupt() {
  const heard = link.player.stop();
  setSpeaking("assistant", false);
  if (!heard.itemId || link.truncated.has(heard.itemId)) return;
  link.truncated.add(heard.itemId);
  stats.truncations.push(heard);
  send({ type: "conversation.item.truncate", item_id: heard.itemId, content_index: 0, audio_end_ms: heard.audioEndMs });
  setState("listening");
}

function onError(error) {
  if (FATAL.has(error.code)) link.fatal = error;
  if (error.code === "session_limit_reached" || error.code === "session_ended_by_admin") return; // said on close
  let message = ERROR_WORDS[error.code] || error.message || "Something went wrong.";
  if (error.param && error.param.startsWith("session.")) {
    settingsStatus(`Not applied: ${error.message}`);
    message = `The settings were not applied: ${error.message}`;
  }
  showAlert(message);
}

// --- typing, examples, clear and export ----------------------------------------------------

// Sends a message now, or (not connected yet) connects first and sends it once the session is open.
function sendText(text, typed = false) {
  if (!connected()) {
    pendingText = { text, typed };
    if (!link && !retry) connect(false, false);
    if (link || retry) notice(SENDING_LATER); // not when connect() could not even start (sign in first)
    return false;
  }
  clearAlert();
  stopAnswer();
  const itemId = `item_page_${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  chat.set(itemId, "user", text);
  send({ type: "conversation.item.create", item: { id: itemId, type: "message", role: "user", content: [{ type: "input_text", text }] } });
  link.turn = { speechEndAt: performance.now(), kind: "text" };
  if (link.activeResponse) {
    send({ type: "response.cancel" });
    link.wantResponse = true; // sent when response.done arrives
  } else {
    send({ type: "response.create" });
  }
  setState("thinking");
  return true;
}

function connected() {
  return !!(link && link.client && link.client.open && stats.sessionId !== null);
}

// Clears the page and, when connected, the server's history too, so the assistant starts afresh.
function clearConversation() {
  if (connected()) {
    stopAnswer();
    if (link.activeResponse) send({ type: "response.cancel" });
    for (const itemId of chat.itemIds()) send({ type: "conversation.item.delete", item_id: itemId });
  }
  chat.clear();
  $("latency-summary").textContent = "Last answer: no turn yet";
  $("latency-breakdown").textContent = "";
}

// "Server defaults": forgets what this browser kept and, when connected, asks the session for the defaults.
function resetSettings() {
  forgetSettings();
  showSettings(DEFAULTS);
  if (stats.pushToTalk) showPushToTalk(true);
  if (connected()) {
    settingsDirty = true;
    sendSettings();
  } else {
    settingsDirty = false;
    clearTimeout(applyTimer);
    showPending(false);
    settingsStatus("Back to the server's defaults.", true);
  }
}

function sendSettings() {
  clearTimeout(applyTimer);
  const { session, problem } = settingsSession(stats.pushToTalk);
  showPending(true); // until the server's session.updated says it runs them
  if (problem) return settingsStatus(problem);
  if (send({ type: "session.update", session })) {
    settingsStatus("Applying…");
  } else {
    settingsDirty = true;
    settingsStatus("The settings will be applied when you connect.");
  }
}

// Apply, or a change in the form: kept in this browser and sent to the session now (when there is one).
function applySettings() {
  settingsDirty = true;
  if (!settingsSession(stats.pushToTalk).problem) saveSettings();
  sendSettings();
}

// The microphone a typed message did not open, asked for now.
async function turnMicrophoneOn() {
  const current = link;
  if (!current || !connected()) return;
  microphoneWanted = true;
  $("microphone-on").hidden = true;
  if (current.client.kind !== "webrtc") return startMicrophone(current, $("microphone-select").value || null);
  try {
    await current.client.addMicrophone($("microphone-select").value || null);
  } catch (error) {
    current.client.microphoneError = error;
  }
  if (link === current) useCallMicrophone(current);
}

// --- wiring -------------------------------------------------------------------------

$("connect").addEventListener("click", () => {
  if (stats.state === "busy") {
    if (!link) connect(false, microphoneWanted); // "Try again now"; a try already under way goes on
  } else if (link) {
    disconnect();
  } else {
    connect();
  }
});
$("stop-retry").addEventListener("click", giveUpRetry);
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("message");
  const text = input.value.trim();
  if (text && sendText(text, true)) input.value = "";
});
$("settings-form").addEventListener("submit", (event) => {
  event.preventDefault();
  applySettings();
});
$("reset-settings").addEventListener("click", resetSettings);
$("speed").addEventListener("input", showSpeed);
const SETTINGS = ["instructions", "voice", "speed", "silence", "threshold", "prefix-padding", "turn-detection", "eagerness",
  "noise-reduction", "max-tokens"];
for (const id of SETTINGS) {
  $(id).addEventListener("input", () => showPending(true)); // typing: not applied until the change is done
  $(id).addEventListener("change", () => {
    settingsDirty = true;
    clearTimeout(applyTimer);
    applyTimer = setTimeout(applySettings, APPLY_AFTER_MS);
  });
}
$("turn-detection").addEventListener("change", showTurnOptions);
$("connection").addEventListener("change", () => {
  saveConnection();
  showConnection();
});
$("microphone-on").addEventListener("click", turnMicrophoneOn);
for (const button of document.querySelectorAll(".example")) {
  button.addEventListener("click", () => sendText(button.textContent.trim()));
}
$("clear").addEventListener("click", clearConversation);
$("export").addEventListener("click", () => chat.download());
$("mute").addEventListener("click", () => setMuted(!stats.muted));
$("ptt").addEventListener("change", (event) => setPushToTalk(event.target.checked));
$("talk").addEventListener("pointerdown", startTalk);
for (const type of ["pointerup", "pointerleave", "pointercancel"]) $("talk").addEventListener(type, endTalk);
const typing = (target) => target.closest("input, textarea, select, button, summary");
document.addEventListener("keydown", (event) => {
  if (event.code === "Space" && stats.pushToTalk && !event.repeat && !typing(event.target)) {
    event.preventDefault();
    startTalk();
  }
});
document.addEventListener("keyup", (event) => {
  if (event.code === "Space" && stats.pushToTalk && !typing(event.target)) endTalk();
});
$("microphone-select").addEventListener("change", (event) => {
  if (link && link.client && link.client.kind === "webrtc") link.client.useMicrophone(event.target.value);
  else if (link) startMicrophone(link, event.target.value);
});
window.addEventListener("pagehide", () => disconnect());
document.addEventListener("s2s:mode", (event) => { // Translate mode (translate.js): the agent's session ends
  if (event.detail !== "translate") return;
  if (retry) giveUpRetry();
  disconnect();
});
restoreSettings(DEFAULTS); // the server's defaults, and over them what this browser kept
restoreConnection(webrtcOffered());
showTurnOptions();
setState("disconnected");
root.dataset.ready = "true";
