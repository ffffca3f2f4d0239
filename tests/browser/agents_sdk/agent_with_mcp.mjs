// A voice agent built with the OpenAI Agents SDK for JavaScript (@openai/agents-realtime) with a hosted MCP tool.
//
// Usage (in tests/browser/agents_sdk, after npm ci):
//   node agent_with_mcp.mjs ws://127.0.0.1:PORT/v1/realtime MCP_SERVER_URL [timeout_ms] [what the user says]
//
// The agent offers one MCP server (hostedMcpTool: the server, not the agent, runs its tools). Once the
// server has listed its tools, the first response is asked for with tool_choice "required" (so that a
// small model calls one); the server runs the call on the MCP server and speaks the answer in the same
// response. Prints one JSON line: the mcp_call items, the audio bytes and transcript of the spoken
// answer, the server event types seen and any errors; exits 0 when the agent spoke after the call ran.
import { hostedMcpTool } from '@openai/agents-core';
import { RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';

const url = process.argv[2];
const mcpUrl = process.argv[3];
const timeoutMs = Number(process.argv[4] ?? 240000);
const question = process.argv[5] ?? 'What is the weather like in Paris?';
const mcpCalls = [];
const errors = [];
const eventTypes = [];
let audioBytes = 0;
let transcript = '';
let asked = false;

const agent = new RealtimeAgent({
  name: 'Weather assistant',
  instructions: 'You are a helpful voice assistant. Use the get_weather tool for questions about the weather, '
    + 'then tell the user the result in one short sentence.',
  tools: [hostedMcpTool({ serverLabel: 'weather', serverUrl: mcpUrl, allowedTools: ['get_weather'],
    requireApproval: 'never' })],
});

const session = new RealtimeSession(agent, {
  transport: 'websocket',
  model: 'gpt-realtime',
  config: { outputModalities: ['audio'], audio: { input: { turnDetection: null } } },
});

function finish(code) {
  console.log(JSON.stringify({ mcpCalls, audioBytes, transcript, errors, eventTypes }));
  session.close();
  process.exit(code);
}

function ask() {
  asked = true;
  session.transport.sendEvent({
    type: 'conversation.item.create',
    item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: question }] },
  });
  session.transport.sendEvent({ type: 'response.create', response: { tool_choice: 'required' } });
}

session.on('error', (event) => errors.push(String(event?.error?.message ?? event?.error ?? event)));
session.on('audio', (event) => { audioBytes += event.data.byteLength; });
session.transport.on('*', (event) => {
  eventTypes.push(event.type);
  if (event.type === 'error') errors.push(JSON.stringify(event.error));
  if (event.type === 'mcp_list_tools.completed' && !asked) ask();
  if (event.type === 'mcp_list_tools.failed') finish(1);
  if (event.type === 'response.output_audio_transcript.delta') transcript += event.delta;
  if (event.type === 'response.done') {
    mcpCalls.push(...event.response.output.filter((item) => item.type === 'mcp_call'));
    const spoken = event.response.output.some((item) => item.type === 'message');
    finish(mcpCalls.length && spoken && audioBytes > 0 && transcript.trim() && !errors.length ? 0 : 1);
  }
});

setTimeout(() => { errors.push(`timed out after ${timeoutMs} ms`); finish(1); }, timeoutMs);

await session.connect({ apiKey: 'sk-local-unused', url });
