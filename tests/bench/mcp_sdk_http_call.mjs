// The client of the MCP server bench over HTTP: the official TypeScript SDK client
// (Streamable HTTP) calling `echo` at argv[3]; argv[2] calls. Prints { call_us }.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
const calls = +process.argv[2];
const c = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
await c.connect(new StreamableHTTPClientTransport(new URL(process.argv[3])));
const req = { name: 'echo', arguments: { text: 'hello' } };
for (let i = 0; i < 200; i++) await c.callTool(req);
const t0 = process.hrtime.bigint();
for (let i = 0; i < calls; i++) {
  const r = await c.callTool(req);
  if (r.content[0].text !== 'hello') throw new Error('wrong answer');
}
const call_us = Number(process.hrtime.bigint() - t0) / calls / 1e3;
await c.close();
console.log(JSON.stringify({ call_us }));
