// The page: connects to /v1/realtime, streams the microphone, plays the answers,
// shows both sides as a chat, and exposes what it did in window.s2sStats for tests.

import { Microphone, Player, RATE, base64FromBytes, microphoneProblem, pcm16FromBase64 } from "./audio.js";
import { Chat } from "./chat.js";
import { RealtimeClient, fetchClientSecret, realtimeUrl } from "./realtime-client.js";

const root = document.getElementById("app");
const $ = (id) => document.getElementById(id);
const chat = new Chat($("chat"));

const BUSY = "All slots are busy, try again";
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
  session_limit_reached: BUSY,
  server_not_ready: "The server is still loading its models. Try again in a minute.",
  invalid_api_key: "The server did not accept this page's credentials. Reload the page and try again.",
  response_failed: "The assistant could not answer that. Please try again.",
  conversation_already_has_active_response: "The assistant is still answering. Wait for it to finish.",
  input_audio_buffer_commit_empty: "There was no speech to send.",
};
const CLOSE_WORDS = {
  1001: "The server is restarting. Connect again in a moment.",
  1006: "Lost the connection to the server.",
  1011: "The server hit an internal error and ended the session. Connect again.",
  1013: "The server is not ready yet. Try again shortly.",
};
const LOG_LIMIT = 400;

const stats = {
  state: "disconnected",
  playedSamples: 0,
  sentSamples: 0,
  events: {}, // server event type -> count
  sent: {}, // client event type -> count
  eventLog: [], // the last LOG_LIMIT server event types, in order
  latencies: [], // one per answered turn: {itemId, kind, ms, fromSpeechEndMs}
  truncations: [], // {itemId, audioEndMs}
  errors: [], // plain-words messages shown
  microphone: "off", // off | on | unavailable
  sessionId: null,
  clientSecret: null, // how the last connection authenticated: "used", "not offered", "none (HTTP 404)"
};
window.s2sStats = stats;

let link = null; // the live connection and its audio, or null
let settingsDirty = false;

function setState(state, text) {
  stats.state = state;
  root.dataset.state = state;
  let label = text || LABELS[state];
  if (state === "listening" && stats.microphone !== "on") label = "Ready: type a message";
  $("status-text").textContent = label;
  $("connect").textContent = link ? "Disconnect" : state === "busy" ? "Try again" : "Connect";
}

function showAlert(message) {
  stats.errors.push(message);
  const alert = $("alert");
  alert.textContent = message;
  alert.hidden = false;
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
  if (!link || !link.client.send(event)) return false;
  count(stats.sent, event.type);
  return true;
}

// --- connecting -----------------------------------------------------------------

async function connect() {
  clearAlert();
  notice("");
  if (root.dataset.signInUrl) {
    showAlert("This server requires you to sign in before you can connect. Use the Sign in link above.");
    setState("error", "Sign in first");
    return;
  }
  const context = new AudioContext({ latencyHint: "interactive" }); // created in the click: allowed to play
  link = {
    context,
    client: null,
    mic: null,
    player: null,
    closing: false,
    fatal: null, // the error event that explains an upcoming close
    activeResponse: null, // id of the response between response.created and response.done
    firstAudio: new Set(), // responses whose first audio was scheduled
    truncated: new Set(), // assistant items cut short by the user
    wantResponse: false, // a response.create waits for the active response to end
    turn: null, // {startedAt, audioEndMs, kind} of the turn waiting for its answer
    sendLog: [], // [total samples sent after a chunk, performance.now()] to time audio_end_ms
  };
  link.player = new Player(context, {
    onSamples: (n) => {
      stats.playedSamples += n;
      root.dataset.playedSamples = String(stats.playedSamples);
    },
    onIdle: () => {
      if (link && stats.state === "speaking") setState(link.activeResponse ? "thinking" : "listening");
    },
  });
  const current = link;
  setState("connecting");
  context.resume().catch(() => {});
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
  current.client = new RealtimeClient(realtimeUrl(root.dataset.realtimePath), secret, {
    onOpen: () => {},
    onEvent: (event) => link === current && onEvent(event),
    onClose: (close) => link === current && onClose(close),
  });
}

function disconnect() {
  if (!link) return;
  link.closing = true;
  link.client && link.client.close();
  teardown();
  setState("disconnected");
}

function teardown() {
  const old = link;
  link = null;
  if (!old) return;
  if (old.mic) old.mic.stop();
  old.player.stop();
  old.context.close().catch(() => {});
  stats.microphone = "off";
  root.dataset.microphone = "off";
  $("level").value = 0;
}

function onClose({ code, reason }) {
  const closing = link.closing;
  const fatal = link.fatal;
  teardown();
  if (closing) return setState("disconnected");
  if ((fatal && fatal.code === "session_limit_reached") || (code === 1008 && /slot/i.test(reason))) {
    showAlert(BUSY);
    return setState("busy");
  }
  if (fatal) return setState("error");
  let message = CLOSE_WORDS[code];
  if (!message && code === 1008) message = `The server refused the session${reason ? `: ${reason}` : ""}.`;
  if (!message) message = `The server ended the session${reason ? `: ${reason}` : ""}.`;
  showAlert(message);
  setState("error");
}

async function startMicrophone(current) {
  const mic = new Microphone(current.context, root.dataset.workletUrl, (pcm, level) => onChunk(current, pcm, level));
  try {
    await mic.start();
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
  current.mic = mic;
  stats.microphone = "on";
  root.dataset.microphone = "on";
  if (stats.state === "listening") setState("listening");
}

function onChunk(current, pcm, level) {
  if (link !== current) return;
  $("level").value = Math.min(1, level * 4);
  if (!send({ type: "input_audio_buffer.append", audio: base64FromBytes(new Uint8Array(pcm.buffer)) })) return;
  stats.sentSamples += pcm.length;
  current.sendLog.push([stats.sentSamples, performance.now()]);
  if (current.sendLog.length > 4000) current.sendLog.splice(0, 1000);
}

// --- server events ------------------------------------------------------------------

function onEvent(event) {
  const type = event.type || "unknown";
  count(stats.events, type);
  stats.eventLog.push(type);
  if (stats.eventLog.length > LOG_LIMIT) stats.eventLog.shift();
  const handler = HANDLERS[type];
  if (handler) handler(event);
}

const HANDLERS = {
  "session.created": (event) => {
    stats.sessionId = event.session.id;
    setState("listening");
    if (settingsDirty) sendSettings();
    else showSettings(event.session);
    startMicrophone(link);
  },
  "session.updated": (event) => {
    settingsDirty = false;
    showSettings(event.session);
    $("settings-status").textContent = "Settings applied.";
  },
  error: (event) => onError(event.error || {}),
  "input_audio_buffer.speech_started": () => {
    root.dataset.userSpeaking = "true";
    if (link.player.playing) interrupt();
  },
  "input_audio_buffer.speech_stopped": (event) => {
    root.dataset.userSpeaking = "false";
    link.turn = { startedAt: performance.now(), audioEndMs: event.audio_end_ms, kind: "voice" };
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
  "response.output_item.added": (event) => chat.entry(event.item.id, "assistant"),
  "response.output_audio_transcript.delta": (event) => chat.append(event.item_id, "assistant", event.delta),
  "response.output_text.delta": (event) => chat.append(event.item_id, "assistant", event.delta),
  "response.output_audio.delta": onAudio,
  "response.output_audio_transcript.done": (event) => chat.finish(event.item_id),
  "response.output_text.done": (event) => chat.finish(event.item_id),
  "response.done": (event) => {
    const response = event.response || {};
    if (link.activeResponse === response.id) link.activeResponse = null;
    const item = (response.output || [])[0];
    if (item && response.status === "cancelled") chat.note(item.id, "interrupted", { status: "cancelled" });
    if (link.wantResponse) {
      link.wantResponse = false;
      send({ type: "response.create" });
    } else if (!link.player.playing && stats.state !== "listening") {
      setState("listening");
    }
  },
  "conversation.item.truncated": (event) => {
    chat.note(event.item_id, `interrupted after ${(event.audio_end_ms / 1000).toFixed(1)} s`, { truncated: "true" });
  },
};

function onAudio(event) {
  if (link.truncated.has(event.item_id)) return; // still in flight when the user cut in
  const pcm = pcm16FromBase64(event.delta);
  const start = link.player.enqueue(event.item_id, pcm);
  if (!link.firstAudio.has(event.response_id)) {
    link.firstAudio.add(event.response_id);
    const playsAt = performance.now() + Math.max(0, start - link.context.currentTime) * 1000;
    recordLatency(event.item_id, playsAt);
  }
  if (stats.state !== "speaking") setState("speaking");
}

// Voice-to-voice latency: from speech_stopped (or the typed message) to the first answer audio played.
function recordLatency(itemId, playsAt) {
  const turn = link.turn;
  link.turn = null;
  if (!turn) return;
  const ms = Math.round(playsAt - turn.startedAt);
  const entry = { itemId, kind: turn.kind, ms, fromSpeechEndMs: null };
  if (turn.audioEndMs != null) {
    const target = (turn.audioEndMs * RATE) / 1000;
    const sent = link.sendLog.find(([samples]) => samples >= target);
    if (sent) entry.fromSpeechEndMs = Math.round(playsAt - sent[1]);
  }
  stats.latencies.push(entry);
  const label = turn.kind === "voice" ? "voice-to-voice" : "text-to-voice";
  chat.note(itemId, `${label} ${ms} ms`, { latencyMs: String(ms) });
  let summary = `Last answer: ${ms} ms ${label}`;
  if (entry.fromSpeechEndMs !== null) summary += ` (${entry.fromSpeechEndMs} ms after you stopped talking)`;
  $("latency").textContent = summary;
  root.dataset.latencyMs = String(ms);
}

// The user spoke over the answer: stop playback now and tell the server what was heard.
function interrupt() {
  const heard = link.player.stop();
  if (!heard.itemId || link.truncated.has(heard.itemId)) return;
  link.truncated.add(heard.itemId);
  stats.truncations.push(heard);
  send({ type: "conversation.item.truncate", item_id: heard.itemId, content_index: 0, audio_end_ms: heard.audioEndMs });
  setState("listening");
}

function onError(error) {
  if (error.code === "session_limit_reached" || error.code === "server_not_ready" || error.code === "invalid_api_key") {
    link.fatal = error;
  }
  if (error.code === "session_limit_reached") {
    showAlert(BUSY);
    setState("busy");
    return;
  }
  let message = ERROR_WORDS[error.code] || error.message || "Something went wrong.";
  if (error.param && error.param.startsWith("session.")) {
    $("settings-status").textContent = `Not applied: ${error.message}`;
    message = `The settings were not applied: ${error.message}`;
  }
  showAlert(message);
}

// --- typing -------------------------------------------------------------------------

function sendText(text) {
  if (!link || !link.client || !link.client.open || stats.sessionId === null) {
    showAlert("Connect first, then send your message.");
    return false;
  }
  clearAlert();
  if (link.player.playing) interrupt();
  const itemId = `item_page_${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  chat.set(itemId, "user", text);
  send({ type: "conversation.item.create", item: { id: itemId, type: "message", role: "user", content: [{ type: "input_text", text }] } });
  link.turn = { startedAt: performance.now(), audioEndMs: null, kind: "text" };
  if (link.activeResponse) {
    send({ type: "response.cancel" });
    link.wantResponse = true; // sent when response.done arrives
  } else {
    send({ type: "response.create" });
  }
  setState("thinking");
  return true;
}

// --- settings -----------------------------------------------------------------------

function showSettings(session) {
  if (!session) return;
  if (typeof session.instructions === "string") $("instructions").value = session.instructions;
  const audio = session.audio || {};
  const voice = (audio.output || {}).voice;
  const select = $("voice");
  if (voice && [...select.options].some((option) => option.value === voice)) select.value = voice;
  const detection = (audio.input || {}).turn_detection;
  if (detection && detection.silence_duration_ms != null) $("silence").value = detection.silence_duration_ms;
}

function sendSettings() {
  const silence = Number($("silence").value);
  if (!Number.isInteger(silence) || silence < 100 || silence > 3000) {
    $("settings-status").textContent = "The pause must be a whole number of milliseconds from 100 to 3000.";
    return;
  }
  const session = {
    type: "realtime",
    instructions: $("instructions").value,
    audio: {
      input: { turn_detection: { type: "server_vad", silence_duration_ms: silence } },
      output: { voice: $("voice").value },
    },
  };
  if (send({ type: "session.update", session })) {
    $("settings-status").textContent = "Applying…";
  } else {
    settingsDirty = true;
    $("settings-status").textContent = "The settings will be applied when you connect.";
  }
}

// --- wiring -------------------------------------------------------------------------

$("connect").addEventListener("click", () => {
  if (link) disconnect();
  else connect();
});
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("message");
  const text = input.value.trim();
  if (text && sendText(text)) input.value = "";
});
$("settings-form").addEventListener("submit", (event) => {
  event.preventDefault();
  settingsDirty = true;
  sendSettings();
});
for (const id of ["instructions", "voice", "silence"]) {
  $(id).addEventListener("change", () => {
    settingsDirty = true;
  });
}
window.addEventListener("pagehide", () => disconnect());
setState("disconnected");
root.dataset.ready = "true";
