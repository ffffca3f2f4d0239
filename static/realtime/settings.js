// The settings form: instructions, voice, speed, turn detection and answer length, read from and written to
// session objects; what the person applied is kept in this browser (localStorage) until they go back to the
// server's defaults, and what the server echoed is said in words under the form.

const $ = (id) => document.getElementById(id);
const FADE_MS = 2500;
const STORE_KEY = "s2s.settings"; // the session.update body last applied, as settingsSession() made it
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
    if (detection.eagerness) $("eagerness").value = detection.eagerness;
  }
  showTurnOptions();
}

// The turn detection the form asks for; null with push-to-talk (the page commits each turn).
export function turnDetection(pushToTalk) {
  if (pushToTalk) return null;
  if (chosenDetection === "semantic_vad") return { type: "semantic_vad", eagerness: $("eagerness").value };
  return { type: "server_vad", silence_duration_ms: Number($("silence").value) };
}

// The session.update body, or a sentence saying what is wrong with the form.
export function settingsSession(pushToTalk) {
  const detection = turnDetection(pushToTalk);
  if (detection && detection.type === "server_vad") {
    const silence = detection.silence_duration_ms;
    if (!Number.isInteger(silence) || silence < 100 || silence > 3000) {
      return { problem: "The pause must be a whole number of milliseconds from 100 to 3000." };
    }
  }
  const limit = $("max-tokens").value.trim();
  if (limit && !(Number.isInteger(Number(limit)) && Number(limit) >= 1 && Number(limit) <= 4096)) {
    return { problem: "The longest answer must be a whole number of tokens from 1 to 4096, or empty." };
  }
  return {
    session: {
      type: "realtime",
      instructions: $("instructions").value,
      max_output_tokens: limit ? Number(limit) : "inf",
      audio: {
        input: { turn_detection: detection },
        output: { voice: $("voice").value, speed: Number($("speed").value) },
      },
    },
  };
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
  if (detection && detection.type === "server_vad") turns = `server VAD, ${detection.silence_duration_ms} ms pause`;
  if (detection && detection.type === "semantic_vad") turns = `semantic VAD, ${detection.eagerness} eagerness`;
  const limit = session.max_output_tokens === "inf" ? "no length limit" : `at most ${session.max_output_tokens} tokens`;
  echo.textContent = `The server runs this session with: voice ${output.voice}, speed ${output.speed}×, ${turns}, ${limit}.`;
  echo.dataset.voice = output.voice || "";
  echo.dataset.speed = String(output.speed);
  echo.dataset.instructions = session.instructions || "";
}
