// A translation session through OpenAI's Node SDK, as its users write it (issue 55): a client with a base URL and
// a key, OpenAIRealtimeTranslationWS, the source transcript asked for, speech streamed in 200 ms frames as a
// microphone sends them, then finish() (session.close, everything through session.closed). The SDK dials wss://
// only; node trusts the test's certificate authority through NODE_EXTRA_CA_CERTS. Run by
// tests/pipeline/test_translation_real.py:
//   node openai_node_translate.mjs https://127.0.0.1:PORT/v1 KEY speech.pcm
// (speech.pcm: 24 kHz PCM16 mono). Prints one JSON line: the URL dialled, the event types seen, the source
// and translated transcripts, the bytes of translated speech, the deltas' elapsed_ms, and any errors.
import OpenAI from "openai";
import { OpenAIRealtimeTranslationWS } from "openai/realtime/translations/ws";
import { readFileSync } from "node:fs";

const [baseURL, apiKey, pcmPath] = process.argv.slice(2);
const FRAME_BYTES = 9600; // 200 ms of 24 kHz PCM16
const TIMEOUT_MS = 180000;

const client = new OpenAI({ apiKey, baseURL });
const rt = await OpenAIRealtimeTranslationWS.create(client, { model: "gpt-realtime-translate" });
const report = { url: String(rt.url), types: [], source: "", translation: "", audio_bytes: 0, elapsed: [], errors: [] };
const finish = (code) => {
  console.log(JSON.stringify(report));
  process.exit(code);
};
const timer = setTimeout(() => {
  report.errors.push(`no session.closed in ${TIMEOUT_MS} ms`);
  finish(1);
}, TIMEOUT_MS);

rt.on("error", (err) => report.errors.push(String(err?.message ?? err)));
rt.on("event", (event) => {
  report.types.push(event.type);
  if (event.type === "session.input_transcript.delta") report.source += event.delta;
  if (event.type === "session.output_transcript.delta") {
    report.translation += event.delta;
    report.elapsed.push(event.elapsed_ms);
  }
  if (event.type === "session.output_audio.delta") report.audio_bytes += Buffer.from(event.delta, "base64").length;
});

rt.socket.on("open", async () => {
  rt.send({
    type: "session.update",
    session: { audio: { input: { transcription: { model: "whisper-1" } }, output: { language: "en" } } },
  });
  const speech = readFileSync(pcmPath);
  for (let at = 0; at < speech.length; at += FRAME_BYTES) {
    const frame = speech.subarray(at, at + FRAME_BYTES);
    rt.send({ type: "session.input_audio_buffer.append", audio: frame.toString("base64") });
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  try {
    await rt.finish({ timeoutMs: TIMEOUT_MS });
  } catch (err) {
    report.errors.push(`finish: ${err?.message ?? err}`);
  }
  clearTimeout(timer);
  finish(report.errors.length ? 1 : 0);
});
