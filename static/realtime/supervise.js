// A live session's supervisor controls in the admin (issue 51): Listen (both sides heard and transcribed live),
// Whisper (a note only the agent reads), Take over (this microphone to the caller) and Hand back, over one
// WebSocket, /v1/realtime?call_id=...&mode=supervise, signed in by the admin's session cookie. Leaving the page
// closes the socket, and the server hands a take-over back by itself. No inline script: CSP.
import { Microphone, Player, base64FromBytes, microphoneProblem, pcm16FromBase64 } from "./audio.js";
import { RealtimeClient, realtimeUrl } from "./realtime-client.js";

const root = document.getElementById("supervise");
const $ = (id) => document.getElementById("supervise-" + id);
// Who said it, by the event that carries it: [side, the text so far is a delta (true) or the whole (false)].
const WORDS = {
  "conversation.item.input_audio_transcription.delta": ["caller", true],
  "conversation.item.input_audio_transcription.completed": ["caller", false],
  "response.output_audio_transcript.delta": ["agent", true],
  "response.output_audio_transcript.done": ["agent", false],
};
const LABELS = { caller: "Caller", agent: "Agent", supervisor: "Supervisor" };
// What the page counts, for people reading the console and for the tests: milliseconds played and sent.
const stats = (window.s2sSupervise = { state: "idle", callerMs: 0, agentMs: 0, sentMs: 0, events: {} });

let client = null; // the socket while listening
let context = null; // one AudioContext, made in the Listen click (allowed to play)
let players = null; // {caller, agent}: two Players mixed on the context
let microphone = null; // while this page has taken over
let closing = false; // this page closed the socket: no error to show

function say(state, text) {
  stats.state = state;
  $("state").textContent = text;
}

function problem(text) {
  const note = $("error");
  note.textContent = text;
  note.hidden = !text;
}

// The buttons that make sense now: listening or not, taken over (by anyone) or not, this microphone open or not.
function controls() {
  const listening = Boolean(client);
  const takenOver = stats.state === "taken_over";
  $("listen").disabled = listening;
  $("stop").disabled = !listening;
  $("whisper").disabled = !listening;
  $("take-over").disabled = !listening || takenOver || Boolean(microphone);
  $("hand-back").disabled = !listening || !(takenOver || microphone);
}

function line(side, itemId) {
  const log = $("transcript");
  let row = [...log.children].find((p) => p.dataset.itemId === itemId); // an item keeps the side it began with
  if (!row) {
    row = document.createElement("p");
    row.dataset.itemId = itemId;
    row.dataset.side = side;
    row.className = side;
    const who = document.createElement("b");
    who.textContent = LABELS[side] + ": ";
    row.append(who, document.createElement("span"));
    log.append(row);
  }
  return row.lastElementChild;
}

function words(event) {
  const [heard, delta] = WORDS[event.type];
  const side = heard === "agent" && stats.state === "taken_over" ? "supervisor" : heard; // the voice of the take-over
  const text = line(side, event.item_id || "");
  if (delta) text.textContent += event.delta || "";
  else text.textContent = event.transcript ?? text.textContent;
}

function play(player, text, side) {
  const pcm = pcm16FromBase64(text || "");
  player.enqueue(side, pcm);
  stats[side + "Ms"] += (pcm.length * 1000) / 24000;
}

function onState(event) {
  const mine = event.state === "taken_over" && event.by === root.dataset.me;
  if (event.state === "taken_over") say("taken_over", `Taken over by ${event.by || "a supervisor"}${mine ? " (you)" : ""}.`);
  else if (stats.state === "taken_over") say("handed_back", "Handed back: the agent answers again. Listening.");
  else say("listening", "Listening.");
  if (!mine) closeMicrophone(); // handed back, or someone else holds the call
  controls();
}

function refused(event) {
  problem((event.error && event.error.message) || "The server refused that.");
  if (microphone && stats.state !== "taken_over") closeMicrophone(); // the take-over was refused
  controls();
}

function whispered(event) {
  const item = document.createElement("li");
  item.textContent = event.text || "";
  $("whispers").append(item);
}

function onEvent(event) {
  stats.events[event.type] = (stats.events[event.type] || 0) + 1;
  if (event.type in WORDS) words(event);
  else if (event.type === "supervisor.input_audio.delta") play(players.caller, event.delta, "caller");
  else if (event.type === "response.output_audio.delta" && !microphone) play(players.agent, event.delta, "agent");
  else if (event.type === "input_audio_buffer.speech_started") players.agent.stop(); // barge-in, as the caller hears it
  else if (event.type === "supervisor.state") onState(event);
  else if (event.type === "supervisor.whisper.added") whispered(event);
  else if (event.type === "error") refused(event);
}

function onClose(close) {
  const mine = closing;
  client = null;
  closing = false;
  closeMicrophone();
  if (players) for (const player of Object.values(players)) player.stop();
  say("idle", mine ? "Not listening." : "Listening ended: the session is over or the connection was lost.");
  if (!mine && close.code !== 1000 && !$("error").textContent) {
    problem("The connection closed" + (close.reason ? ": " + close.reason + "." : "."));
  }
  controls();
}

function listen() {
  problem("");
  context = context || new AudioContext({ latencyHint: "interactive" });
  players = players || { caller: new Player(context), agent: new Player(context) };
  context.resume();
  say("connecting", "Connecting…");
  client = new RealtimeClient(realtimeUrl(root.dataset.socketPath), null, {
    onOpen: () => say("listening", "Listening."),
    onEvent,
    onClose,
  });
  controls();
}

function stop() {
  closing = true;
  if (client) client.close();
}

function whisper(event) {
  if (event.key !== "Enter" || event.isComposing) return;
  event.preventDefault();
  const text = event.target.value.trim();
  if (text && client && client.send({ type: "supervisor.whisper", text })) event.target.value = "";
}

async function takeOver() {
  problem("");
  if (!client || !client.send({ type: "supervisor.take_over" })) return; // the agent stops now, before the mic opens
  const mine = new Microphone(context, root.dataset.workletUrl, (pcm) => {
    const audio = base64FromBytes(new Uint8Array(pcm.buffer));
    if (microphone === mine && client && client.send({ type: "supervisor.audio.append", audio })) {
      stats.sentMs += (pcm.length * 1000) / 24000;
    }
  });
  microphone = mine;
  players.agent.stop(); // from here on the agent's audio is this microphone's: not played back to its speaker
  controls();
  try {
    await mine.start();
    if (microphone !== mine) mine.stop(); // handed back while it opened
  } catch (error) {
    if (microphone === mine) handBack();
    problem(microphoneProblem(error) + " The call was handed back to the agent.");
  }
}

function closeMicrophone() {
  if (microphone) microphone.stop();
  microphone = null;
}

function handBack() {
  closeMicrophone();
  if (client) client.send({ type: "supervisor.hand_back" });
  controls();
}

if (root) {
  $("listen").addEventListener("click", listen);
  $("stop").addEventListener("click", stop);
  $("whisper").addEventListener("keydown", whisper);
  $("take-over").addEventListener("click", takeOver);
  $("hand-back").addEventListener("click", handBack);
  window.addEventListener("pagehide", stop); // leaving the page or closing the tab ends listening
  controls();
}
