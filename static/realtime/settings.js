// The settings form: instructions, voice, speed, turn detection (its threshold, padding, pause or eagerness),
// noise reduction and answer length, read from and written to session objects, and the connection (WebRTC or
// WebSocket). What the person applied is kept in this browser (localStorage) until they go back to the server's
// defaults, and what the server echoed is said in words under the form.

const $ = (id) => document.getElementById(id);
const FADE_MS = 2500;
const STORE_KEY = "s2s.settings"; // the session.update body last applied, as settingsSession() made it
const CONNECTION_KEY = "s2s.connection"; // "webrtc" or "websocket", as last chosen here
let fadeTimer = null;

// Shows a status line under the form; "Settings applied." fades away after a moment.
export function settingsStatus(text, fades = false) {
  const status = $("settings-status");
  clearTimeout(fadeTimer);
  status.classList.remove("faded");
  status.textContent = text;
  if (fades) {
    fadeTimer = setTimeout(() => {
      status.classList.add("faded");
      fadeTimer = setTimeout(() => {
        status.textContent = "";
        status.classList.remove("faded");
      }, 600);
    }, FADE_MS);
  }
}

let chosenDetection = "server_vad"; // what the select said before push-to-talk took turn detection off

export function showTurnOptions() {
  const kind = $("turn-detection").value;
  if (kind !== "none") chosenDetection = kind;
  $("server-vad-options").hidden = kind !== "server_vad";
  $("semantic-vad-options").hidden = kind !== "semantic_vad";
}

// Push-to-talk commits each turn itself: the form says turn detection is off, and gives it back after.
export function showPushToTalk(on) {
  const select = $("turn-detection");
  select.disabled = on;
  select.value = on ? "none" : chosenDetection;
  showTurnOptions();
}

export function showSpeed() {
  $("speed-value").textContent = `${Number($("speed").value).toFixed(2)}×`;
}

// Fills the form from a session object: one the server sent (session.created / session.updated), its
// defaults, or the settings kept in this browser (a session.update body).
export function showSettings(session) {
  if (!session) return;
  if (typeof session.instructions === "string") $("instructions").value = session.instructions;
  const audio = session.audio || {};
  const output = audio.output || {};
  const select = $("voice");
  if (output.voice) {
    // The OpenAI names the server accepts are aliases of its default voice: that is the first option.
    const known = [...select.options].some((option) => option.value === output.voice);
    select.value = known ? output.voice : select.options[0] ? select.options[0].value : "";
  }
  if (typeof output.speed === "number") {
    $("speed").value = output.speed;
    showSpeed();
  }
  if (session.max_output_tokens != null) {
    $("max-tokens").value = session.max_output_tokens === "inf" ? "" : session.max_output_tokens;
  }
  const input = audio.input || {};
  const detection = input.turn_detection;
  if ("turn_detection" in input && detection === null) $("turn-detection").value = "none";
  if (detection && (detection.type === "server_vad" || detection.type === "semantic_vad")) {
    $("turn-detection").value = detection.type;
    if (detection.silence_duration_ms != null) $("silence").value = detection.silence_duration_ms;
    if (detection.threshold != null) $("threshold").value = detection.threshold;
    if (detection.prefix_padding_ms != null) $("prefix-padding").value = detection.prefix_padding_ms;
    if (detection.eagerness) $("eagerness").value = detection.eagerness;
  }
  if ("noise_reduction" in input) $("noise-reduction").value = (input.noise_reduction || {}).type || "";
  showTurnOptions();
}

// The turn detection the form asks for; null with push-to-talk (the page commits each turn).
export function turnDetection(pushToTalk) {
  if (pushToTalk) return null;
  if (chosenDetection === "semantic_vad") return { type: "semantic_vad", eagerness: $("eagerness").value };
  return {
    type: "server_vad",
    threshold: Number($("threshold").value),
    prefix_padding_ms: Number($("prefix-padding").value),
    silence_duration_ms: Number($("silence").value),
  };
}

// A sentence when a number input is empty or outside its range (the template's min, max and step), else null.
function outOfRange(id, what) {
  const input = $(id);
  if (input.checkValidity() && input.value.trim() !== "") return null;
  const whole = input.step && Number.isInteger(Number(input.step)) ? "a whole number" : "a number";
  return `${what} must be ${whole} from ${input.min} to ${input.max}.`;
}

// The session.update body, or a sentence saying what is wrong with the form.
export function settingsSession(pushToTalk) {
  const detection = turnDetection(pushToTalk);
  if (detection && detection.type === "server_vad") {
    const problem = outOfRange("silence", "The pause") || outOfRange("threshold", "The speech threshold")
      || outOfRange("prefix-padding", "The audio kept before your speech");
    if (problem) return { problem };
  }
  const limit = $("max-tokens").value.trim();
  if (limit && !$("max-tokens").checkValidity()) {
    return { problem: `The longest answer must be a whole number of tokens from 1 to ${$("max-tokens").max}, or empty.` };
  }
  const noise = $("noise-reduction").value;
  return {
    session: {
      type: "realtime",
      instructions: $("instructions").value,
      max_output_tokens: limit ? Number(limit) : "inf",
      audio: {
        input: { turn_detection: detection, noise_reduction: noise ? { type: noise } : null },
        output: { voice: $("voice").value, speed: Number($("speed").value) },
      },
    },
  };
}

// --- not applied yet -------------------------------------------------------------------------

// Marks the form while what it shows is not what the session runs (a change on its way, or no session).
export function showPending(pending) {
  $("settings-pending").hidden = !pending;
  $("settings-form").dataset.pending = String(pending);
}

// --- the connection ------------------------------------------------------------------------

// WebRTC or the WebSocket: ?transport= in the address, else what was chosen here, else WebRTC where offered.
export function restoreConnection(webrtcOffered) {
  const select = $("connection");
  let wanted = new URLSearchParams(window.location.search).get("transport");
  if (!wanted) {
    try {
      wanted = window.localStorage.getItem(CONNECTION_KEY);
    } catch (error) {
      wanted = null;
    }
  }
  select.value = webrtcOffered && wanted !== "websocket" ? "webrtc" : "websocket";
  if (!webrtcOffered) select.querySelector("option[value=webrtc]").disabled = true;
}

export function saveConnection() {
  try {
    window.localStorage.setItem(CONNECTION_KEY, $("connection").value);
  } catch (error) {
    // it still applies to the next Connect of this page
  }
}

// --- kept in this browser ---------------------------------------------------------------

// The settings last applied here, or null (none, or storage this browser refuses).
export function savedSettings() {
  try {
    const saved = JSON.parse(window.localStorage.getItem(STORE_KEY) || "null");
    return saved && typeof saved === "object" ? saved : null;
  } catch (error) {
    return null;
  }
}

function showSaved(saved) {
  $("settings-saved").hidden = !saved;
  $("settings-mark").hidden = !saved;
}

// Keeps the form's settings (with the turn detection chosen, push-to-talk or not) for the next session.
export function saveSettings() {
  const { session } = settingsSession(false);
  if (!session) return;
  try {
    window.localStorage.setItem(STORE_KEY, JSON.stringify(session));
  } catch (error) {
    return; // private mode or full: they still apply to this session
  }
  showSaved(true);
}

export function forgetSettings() {
  try {
    window.localStorage.removeItem(STORE_KEY);
  } catch (error) {
    // nothing was kept
  }
  showSaved(false);
}

// At load: the server's defaults, then what this browser kept on top of them.
export function restoreSettings(defaults) {
  showSettings(defaults);
  const saved = savedSettings();
  if (saved) showSettings(saved);
  showSaved(!!saved);
  showSpeed();
  return !!saved;
}

// --- what the server echoed ---------------------------------------------------------------

// The session the server says it runs, in a line of words; "" clears it.
export function showEcho(session) {
  const echo = $("settings-echo");
  if (!session) {
    echo.textContent = "";
    return;
  }
  const audio = session.audio || {};
  const output = audio.output || {};
  const detection = (audio.input || {}).turn_detection;
  let turns = "push to talk (no turn detection)";
  if (detection && detection.type === "server_vad") {
    turns = `server VAD, ${detection.silence_duration_ms} ms pause, threshold ${detection.threshold}, `
      + `${detection.prefix_padding_ms} ms kept before speech`;
  }
  if (detection && detection.type === "semantic_vad") turns = `semantic VAD, ${detection.eagerness} eagerness`;
  const noise = ((audio.input || {}).noise_reduction || {}).type;
  const denoise = noise ? `${noise.replace("_", " ")} noise reduction` : "no noise reduction";
  const limit = session.max_output_tokens === "inf" ? "no length limit" : `at most ${session.max_output_tokens} tokens`;
  echo.textContent = `The server runs this session with: voice ${output.voice}, speed ${output.speed}×, ${turns}, ${denoise}, ${limit}.`;
  echo.dataset.noiseReduction = noise || "";
  echo.dataset.voice = output.voice || "";
  echo.dataset.speed = String(output.speed);
  echo.dataset.instructions = session.instructions || "";
}
