// The peer of the MCP bench: the official TypeScript SDK client (@modelcontextprotocol/sdk,
// pinned in tests/mcp/package.json, from build/npm) doing what tests/bench/mcp_client.lua does.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
const [server, calls, ntools, lists] = [process.argv[2], +process.argv[3], +process.argv[4], +process.argv[5]];
async function connect(n) {
  const c = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
  await c.connect(new StdioClientTransport({ command: 'node', args: [server, String(n)] }));
  return c;
}
const c = await connect(1);
const args = { name: 'echo', arguments: { text: 'hello' } };
for (let i = 0; i < 200; i++) await c.callTool(args);
let t0 = process.hrtime.bigint();
for (let i = 0; i < calls; i++) await c.callTool(args);
const call_us = Number(process.hrtime.bigint() - t0) / calls / 1e3;
await c.close();
const big = await connect(ntools);
await big.listTools();
t0 = process.hrtime.bigint();
for (let i = 0; i < lists; i++) { const r = await big.listTools(); if (r.tools.length !== ntools) throw new Error('short'); }
const list_ms = Number(process.hrtime.bigint() - t0) / lists / 1e6;
await big.close();
console.log(JSON.stringify({ call_us, list_ms }));
