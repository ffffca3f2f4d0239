// One typed turn through OpenAI's Node SDK, as its users write it: a client with a base URL and a key, a
// Realtime class, a text question, the answer. The SDK always dials wss://; node trusts the test's certificate
// authority through NODE_EXTRA_CA_CERTS. Run by tests/clients/test_node_openai.py:
//   node openai_node.mjs ga|beta|websocket https://127.0.0.1:PORT/v1 KEY
// Prints one JSON line: the URL dialled, the event types seen, the answer's text and the response's status.
import OpenAI from "openai";
import { OpenAIRealtimeWS } from "openai/realtime/ws";
import { OpenAIRealtimeWebSocket } from "openai/realtime/websocket";
import { OpenAIRealtimeWS as BetaRealtimeWS } from "openai/beta/realtime/ws";

const [kind, baseURL, apiKey] = process.argv.slice(2);
const TIMEOUT_MS = 30000;
const QUESTION = "hello over tls";

const client = new OpenAI({ apiKey, baseURL, dangerouslyAllowBrowser: kind === "websocket" });
const rt = {
  ga: () => new OpenAIRealtimeWS({ model: "gpt-realtime" }, client),
  beta: () => new BetaRealtimeWS({ model: "gpt-4o-realtime-preview" }, client),
  websocket: () => new OpenAIRealtimeWebSocket({ model: "gpt-realtime" }, client),
}[kind]();

const report = { url: String(rt.url), types: [], text: "", status: null, errors: [] };
const finish = (code) => {
  console.log(JSON.stringify(report));
  rt.close();
  process.exit(code);
};
const timer = setTimeout(() => {
  report.errors.push(`no response.done in ${TIMEOUT_MS} ms`);
  finish(1);
}, TIMEOUT_MS);

rt.on("error", (err) => report.errors.push(String(err?.message ?? err)));
rt.on("event", (event) => {
  report.types.push(event.type);
  if (event.type.endsWith("text.delta") || event.type.endsWith("transcript.delta")) report.text += event.delta;
  if (event.type === "response.done") {
    clearTimeout(timer);
    report.status = event.response.status;
    finish(0);
  }
});

const opened = () => {
  const modalities = kind === "beta" ? { modalities: ["text"] } : { output_modalities: ["text"] };
  rt.send({
    type: "conversation.item.create",
    item: { type: "message", role: "user", content: [{ type: "input_text", text: QUESTION }] },
  });
  rt.send({ type: "response.create", response: modalities });
};
if (kind === "websocket") rt.socket.addEventListener("open", opened);
else rt.socket.on("open", opened);
