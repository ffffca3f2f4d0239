// A voice agent built with the OpenAI Agents SDK for JavaScript (@openai/agents-realtime), over WebSocket.
//
// Usage (in tests/browser/agents_sdk, after npm ci):
//   node agent_with_tool.mjs ws://127.0.0.1:PORT/v1/realtime [timeout_ms] [what the user says]
//
// The agent has one function tool (zod parameters) and the session's tool_choice, "auto": the model
// chooses to call it; the SDK runs the tool, sends its function_call_output and asks for the next
// response, which the agent speaks.
// Prints one JSON line: the tool's calls, the audio bytes and transcript of the spoken
// answer, the server event types seen and any errors; exits 0 when the agent spoke after
// the tool ran, 1 otherwise.
import { RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { z } from 'zod';

const url = process.argv[2];
const timeoutMs = Number(process.argv[3] ?? 240000);
const question = process.argv[4] ?? 'What is the weather like in Paris right now?';
const calls = [];
const errors = [];
const eventTypes = [];
let audioBytes = 0;
let transcript = '';
let responsesDone = 0;

const getWeather = tool({
  name: 'get_weather',
  description: 'Get the current weather in a city.',
  parameters: z.object({ city: z.string().describe('The name of the city') }),
  async execute({ city }) {
    calls.push({ city });
    return `It is sunny and 21 degrees Celsius in ${city}.`;
  },
});

const agent = new RealtimeAgent({
  name: 'Weather assistant',
  instructions: 'call the get_weather tool, then answer in one short sentence using its result',
  tools: [getWeather],
});

const session = new RealtimeSession(agent, {
  transport: 'websocket',
  model: 'gpt-realtime',
  config: { outputModalities: ['audio'], audio: { input: { turnDetection: null } } },
});

function finish(code) {
  console.log(JSON.stringify({ calls, audioBytes, transcript, responsesDone, errors, eventTypes }));
  session.close();
  process.exit(code);
}

session.on('error', (event) => errors.push(String(event?.error?.message ?? event?.error ?? event)));
session.on('audio', (event) => { if (calls.length) audioBytes += event.data.byteLength; });
session.transport.on('*', (event) => {
  eventTypes.push(event.type);
  if (event.type === 'error') errors.push(JSON.stringify(event.error));
  if (event.type === 'response.output_audio_transcript.delta' && calls.length) transcript += event.delta;
  if (event.type === 'response.done') {
    responsesDone += 1;
    const spoken = event.response.output.some((item) => item.type === 'message');
    if (calls.length && spoken) finish(audioBytes > 0 && transcript.trim() && !errors.length ? 0 : 1);
  }
});

setTimeout(() => { errors.push(`timed out after ${timeoutMs} ms`); finish(1); }, timeoutMs);

await session.connect({ apiKey: 'sk-local-unused', url });
session.transport.sendEvent({
  type: 'conversation.item.create',
  item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: question }] },
});
session.transport.sendEvent({
  type: 'response.create',
});
