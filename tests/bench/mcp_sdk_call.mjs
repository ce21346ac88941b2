// The client of the MCP server bench: the official TypeScript SDK client calling
// `echo` on the stdio server given as a command line (argv[3..]); argv[2] calls.
// Prints { call_us }: microseconds per tools/call round trip, after 200 warm-up calls.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
const calls = +process.argv[2];
const [command, ...args] = process.argv.slice(3);
const c = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
await c.connect(new StdioClientTransport({ command, args }));
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
