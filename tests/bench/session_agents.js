// The peer of tests/bench/session_bench.py: the same session workload run by
// @openai/agents (npm). Loaded with NODE_PATH pointing at build/bench/npm.
//
//   node session_agents.js mock BASE_URL N TURNS
//     N sessions run concurrently; each runs TURNS agent runs in a row, the
//     conversation kept across them (the next run's input is the previous
//     run's history plus the new user message). Each run streams: the model
//     (OpenAIChatCompletionsModel against the mock server at BASE_URL)
//     calls the function tool "lookup" once, then answers.
//   node session_agents.js scripted N TURNS
//     the same with the SDK's own zero-latency ScriptedModel (one responder
//     step per model call) instead of HTTP: the runtime's cost per step.
//
// Prints one JSON line: cpu_s (user + system of this process, all threads,
// around the workload only: after the modules are loaded), wall_s,
// maxrss_kib (process.resourceUsage().maxRSS), turns, steps, texts.
'use strict';
process.env.OPENAI_AGENTS_DISABLE_TRACING = '1';

const agents = require('@openai/agents');
const { z } = require('zod');

const [mode, ...rest] = process.argv.slice(2);
agents.setTracingDisabled(true);

const RESULT = 'lookup result: 42';
const lookup = agents.tool({
  name: 'lookup',
  description: 'Look a question up.',
  parameters: z.object({ q: z.string() }),
  execute: async ({ q }) => RESULT,
});

let model, base, n, turns;
let steps = 0;
if (mode === 'mock') {
  [base, n, turns] = [rest[0], Number(rest[1]), Number(rest[2])];
  const OpenAIMod = require('openai');
  const OpenAI = OpenAIMod.default || OpenAIMod.OpenAI || OpenAIMod;
  const client = new OpenAI({ apiKey: 'sk-bench', baseURL: base, maxRetries: 0 });
  model = new agents.OpenAIChatCompletionsModel(client, 'mock');
} else if (mode === 'scripted') {
  [n, turns] = [Number(rest[0]), Number(rest[1])];
  const T = require('@openai/agents/testing');
  // One responder step per model call: a tool call after a user message,
  // a final text after a tool result (the mock server's rule).
  let k = 0;
  const respond = (call) => {
    const input = call.request.input;
    const last = Array.isArray(input) ? input[input.length - 1] : { role: 'user', content: input };
    if (last && last.type === 'function_call_result') {
      return [T.assistantMessage('The answer is 42.')];
    }
    k++;
    return [T.functionCall('lookup', { q: 'question' }, { callId: 'call_' + k })];
  };
  const steps = [];
  for (let i = 0; i < n * turns * 2; i++) steps.push(T.modelResponder(respond));
  model = new T.ScriptedModel(steps);
} else {
  console.error('usage: session_agents.js mock BASE N TURNS | scripted N TURNS');
  process.exit(2);
}

const agent = new agents.Agent({
  name: 'assistant',
  instructions: 'You are a benchmark assistant. Use lookup once, then answer.',
  model,
  tools: [lookup],
});

let texts = 0;
async function session(i) {
  let history = [];
  for (let t = 1; t <= turns; t++) {
    const input = history.concat([{ role: 'user', content: `session ${i} question ${t}` }]);
    const res = await agents.run(agent, input, { stream: true, maxTurns: 10 });
    for await (const ev of res) {
      if (ev.type === 'raw_model_stream_event' && ev.data.type === 'response_done') steps++;
    }
    await res.completed;
    if (res.error) throw res.error;
    if (typeof res.finalOutput !== 'string' || res.finalOutput.length === 0) {
      throw new Error(`session ${i} turn ${t}: no final text`);
    }
    texts++;
    history = res.history;
  }
}

(async () => {
  const c0 = process.cpuUsage();
  const w0 = process.hrtime.bigint();
  const all = [];
  for (let i = 1; i <= n; i++) all.push(session(i));
  await Promise.all(all);
  const c = process.cpuUsage(c0);
  const wall = Number(process.hrtime.bigint() - w0) / 1e9;
  console.log(JSON.stringify({
    cpu_s: (c.user + c.system) / 1e6, wall_s: wall,
    maxrss_kib: process.resourceUsage().maxRSS, turns: n * turns, steps, texts,
  }));
})().catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
