// The settings form: instructions, voice and turn detection, read from and written to session objects.

const $ = (id) => document.getElementById(id);
const FADE_MS = 2500;
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

// Fills the form from a session object the server sent (session.created / session.updated).
export function showSettings(session) {
  if (!session) return;
  if (typeof session.instructions === "string") $("instructions").value = session.instructions;
  const audio = session.audio || {};
  const voice = (audio.output || {}).voice;
  const select = $("voice");
  if (voice) {
    // The OpenAI names the server accepts are aliases of its default voice: that is the first option.
    const known = [...select.options].some((option) => option.value === voice);
    select.value = known ? voice : select.options[0] ? select.options[0].value : "";
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
      audio: { input: { turn_detection: detection }, output: { voice: $("voice").value } },
    },
  };
}
