// The page's Translate mode: a translation session (/v1/realtime/translations) instead of the agent. The
// microphone is the source; the translated speech plays, and the two live transcripts (Source, Translation) fill
// from session.input_transcript.delta and session.output_transcript.delta. Over WebRTC as OpenAI's guide has it
// (the offer with its settings to /v1/realtime/translations/calls, the speech on the answer's track, the events on
// oai-events), or over the WebSocket, as the Connection setting says. What it did is in window.s2sTranslation.

import { Microphone, Player, base64FromBytes, microphoneProblem, pcm16FromBase64 } from "./audio.js";
import { RealtimeClient, fetchClientSecret, realtimeUrl } from "./realtime-client.js";
import { WebRTCClient, webrtcSupported } from "./webrtc-client.js";

const root = document.getElementById("app");
const panel = document.getElementById("translate");
const $ = (id) => document.getElementById(id);
const CHUNK_MS = 200; // the frames a translation session takes over the WebSocket
const TRANSCRIPTION = { model: "whisper-1" }; // asks for the Source transcript
const LANGUAGE_PARAM = "session.audio.output.language";
const BUSY = "Every unit of this server is busy. Try again in a moment.";
const ERROR_WORDS = {
  session_limit_reached: BUSY,
  server_not_ready: "The server is still loading its models. Try again in a minute.",
  invalid_api_key: "The server did not accept this page's credentials. Reload the page and try again.",
  session_ended_by_admin: "An administrator ended this session.",
};

const stats = {
  state: "off", // off | connecting | translating | error
  transport: null,
  clientSecret: null, // how the last session authenticated: "used", "not offered", "none (HTTP 404)"
  sessionId: null,
  language: null, // the target the session runs with
  events: {},
  sent: {},
  source: "",
  translation: "",
  playedSamples: 0,
  errors: [],
};
window.s2sTranslation = stats;

let link = null; // {client, context, player, mic, closing, fatal} while a session is on

function setState(state, text) {
  stats.state = state;
  panel.dataset.state = state;
  const label = text || { off: "Not translating", connecting: "Connecting…", error: "Stopped" }[state];
  if ($("translate-status-text").textContent !== label) $("translate-status-text").textContent = label;
  $("translate-start").textContent = link ? "Stop translating" : "Start translating";
}

function languageName(code) {
  const option = [...$("target-language").options].find((candidate) => candidate.value === code);
  return option ? option.textContent : code;
}

function showAlert(message) {
  stats.errors.push(message);
  $("translate-alert").textContent = message;
  $("translate-alert").hidden = false;
}

function clearAlert() {
  $("translate-alert").hidden = true;
  $("translate-alert").textContent = "";
}

function send(event) {
  if (!link || !link.client || !link.client.send(event)) return false;
  stats.sent[event.type] = (stats.sent[event.type] || 0) + 1;
  return true;
}

function played(samples) {
  stats.playedSamples += samples;
  panel.dataset.playedSamples = String(stats.playedSamples);
}

// A phrase's words after those already shown, with a space between unless the delta brings its own.
function append(id, key, delta) {
  const before = stats[key];
  const text = before && !/\s$/.test(before) && !/^\s/.test(delta) ? ` ${delta}` : delta;
  stats[key] = before + text;
  $(id).append(text);
  $(id).scrollTop = $(id).scrollHeight;
}

function settings() {
  return { audio: { output: { language: $("target-language").value }, input: { transcription: TRANSCRIPTION } } };
}

// --- starting and stopping ---------------------------------------------------------------------

async function start() {
  clearAlert();
  if (root.dataset.signInUrl) {
    showAlert("This server requires you to sign in before you can translate. Use the Sign in link above.");
    return setState("error", "Sign in first");
  }
  const context = new AudioContext({ latencyHint: "interactive" }); // created in the click: allowed to play
  link = { client: null, context, player: new Player(context, { onSamples: played }), mic: null, closing: false, fatal: null };
  const current = link;
  stats.sessionId = null;
  setState("connecting");
  context.resume().catch(() => {});
  if ((await slotStatus()) === "full") return fail(current, BUSY);
  let secret = null;
  try { // a secret minted for a translation: it opens a translation session and nothing else
    const answer = await fetchClientSecret(root.dataset.translationSecretsUrl, root.dataset.csrfToken, settings());
    secret = answer.secret;
    stats.clientSecret = answer.status;
  } catch (error) {
    return fail(current, error.message);
  }
  if (link !== current) return;
  if (webrtcWanted() && (await startCall(current, secret))) return;
  if (link !== current) return;
  stats.transport = "websocket";
  if (secret) { // a secret is good for one session: the call may have spent it
    secret = (await fetchClientSecret(root.dataset.translationSecretsUrl, root.dataset.csrfToken, settings())
      .catch(() => ({}))).secret;
  }
  if (link !== current) return;
  current.client = new RealtimeClient(realtimeUrl(root.dataset.translationPath), secret, {
    onOpen: () => {},
    onEvent: (event) => link === current && onEvent(event),
    onClose: (close) => link === current && onClose(close),
  });
}

function webrtcWanted() {
  return webrtcSupported() && !!root.dataset.translationCallsUrl && $("connection").value === "webrtc";
}

async function slotStatus() {
  if (!root.dataset.slotsUrl) return null;
  try {
    const response = await fetch(root.dataset.slotsUrl, { credentials: "same-origin", cache: "no-store" });
    return response.ok ? (await response.json()).status : null;
  } catch (error) {
    return null;
  }
}

// True when the call is up or the page has said why not; false: try the WebSocket.
async function startCall(current, secret) {
  const client = new WebRTCClient(root.dataset.translationCallsUrl, secret, {
    onOpen: () => {},
    onEvent: (event) => link === current && onEvent(event),
    onClose: (close) => link === current && current.client === client && onClose(close),
    onTrack: (stream) => tapTranslation(current, stream),
  }, JSON.parse(root.dataset.iceServers || "[]"));
  client.session = settings();
  current.client = client;
  stats.transport = "webrtc";
  try {
    await client.start($("microphone-select").value || null, true);
  } catch (error) {
    client.close();
    if (link !== current) return true;
    current.client = null;
    if (error.status) {
      fail(current, error.status === 429 ? BUSY : ERROR_WORDS[error.error && error.error.code] || error.message);
      return true;
    }
    return false;
  }
  if (!client.microphone) showAlert(`${microphoneProblem(client.microphoneError)} There is nothing to translate.`);
  return true;
}

// Counts the translation's audible samples as they play from the call's track.
async function tapTranslation(current, stream) {
  await current.context.audioWorklet.addModule(root.dataset.workletUrl);
  if (link !== current) return;
  const node = new AudioWorkletNode(current.context, "s2s-capture", {
    numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
    processorOptions: { chunkMs: 20 },
  });
  node.port.onmessage = (event) => {
    if (link === current && event.data.type === "chunk" && event.data.level >= 0.003) played(event.data.pcm.byteLength / 2);
  };
  current.context.createMediaStreamSource(stream).connect(node);
}

// The WebSocket's microphone: 24 kHz PCM16 in 200 ms frames.
async function startMicrophone(current) {
  const mic = new Microphone(current.context, root.dataset.workletUrl, (pcm) => {
    if (link === current) send({ type: "session.input_audio_buffer.append", audio: base64FromBytes(new Uint8Array(pcm.buffer)) });
  }, CHUNK_MS);
  try {
    await mic.start($("microphone-select").value || null);
  } catch (error) {
    mic.stop();
    if (link === current) showAlert(`${microphoneProblem(error)} There is nothing to translate.`);
    return;
  }
  if (link !== current) return mic.stop();
  current.mic = mic;
}

// Stops: the call hung up (DELETE) or the socket closed, and with it the server's unit given back.
function stop() {
  if (!link) return;
  link.closing = true;
  if (link.client) link.client.close();
  teardown();
  setState("off");
}

function teardown() {
  const old = link;
  link = null;
  if (!old) return;
  if (old.mic) old.mic.stop();
  old.player.stop();
  old.context.close().catch(() => {});
}

function fail(current, message) {
  if (link !== current) return;
  teardown();
  showAlert(message);
  setState("error");
}

function onClose({ code, reason }) {
  const { closing, fatal } = link;
  teardown();
  if (closing) return setState("off");
  if (fatal) return setState("error");
  showAlert(code === 1006 ? "Lost the connection to the server." : `The server ended the session${reason ? `: ${reason}` : ""}.`);
  setState("error");
}

// --- the session's events --------------------------------------------------------------------

function onEvent(event) {
  stats.events[event.type] = (stats.events[event.type] || 0) + 1;
  const handler = HANDLERS[event.type];
  if (handler) handler(event);
}

function running(session) {
  stats.language = session.audio.output.language;
  setState("translating", `Translating into ${languageName(stats.language)}: speak now`);
}

const HANDLERS = {
  "session.created": (event) => {
    stats.sessionId = event.session.id;
    running(event.session);
    const wanted = settings();
    const input = event.session.audio.input || {};
    if (stats.language !== wanted.audio.output.language || !input.transcription) send({ type: "session.update", session: wanted });
    if (link.client.kind !== "webrtc") startMicrophone(link);
  },
  "session.updated": (event) => running(event.session),
  "session.input_transcript.delta": (event) => append("source-text", "source", event.delta),
  "session.output_transcript.delta": (event) => append("translation-text", "translation", event.delta),
  "session.output_audio.delta": (event) => link.player.enqueue("translation", pcm16FromBase64(event.delta)),
  "session.closed": () => stop(),
  error: (event) => onError(event.error || {}),
};

// A refused target: the server's words, and the choice back on the language the session still runs with.
function onError(error) {
  if (ERROR_WORDS[error.code]) {
    link.fatal = error;
    return showAlert(ERROR_WORDS[error.code]);
  }
  if (error.param === LANGUAGE_PARAM) {
    if (stats.language) $("target-language").value = stats.language;
    return showAlert(`That target language is not available: ${error.message}`);
  }
  showAlert(error.message || "Something went wrong.");
}

function changeTarget() {
  clearAlert();
  if (link && stats.sessionId) send({ type: "session.update", session: { audio: { output: { language: $("target-language").value } } } });
}

// --- the mode switch ----------------------------------------------------------------------

function setMode(mode) {
  if (mode !== "translate") stop();
  root.dataset.mode = mode;
  panel.hidden = mode !== "translate";
  document.dispatchEvent(new CustomEvent("s2s:mode", { detail: mode })); // the agent's side disconnects
}

for (const radio of document.querySelectorAll("input[name=mode]")) {
  radio.addEventListener("change", () => radio.checked && setMode(radio.value));
}
$("translate-start").addEventListener("click", () => (link ? stop() : start()));
$("target-language").addEventListener("change", changeTarget);
window.addEventListener("pagehide", stop);
const checked = document.querySelector("input[name=mode]:checked"); // a reload may keep the choice
setMode(checked ? checked.value : "talk");
setState("off");
panel.dataset.ready = "true";
