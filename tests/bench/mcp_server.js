// The MCP stdio server both clients of the MCP bench call (tests/bench/mcp_bench.py):
// plain Node, no SDK, so the server costs the same whoever calls it. argv[2]: how many
// tools tools/list returns (one page); tools/call echoes its "text" argument.
'use strict';
const ntools = parseInt(process.argv[2] || '1', 10);
const tools = [];
for (let i = 0; i < ntools; i++)
  tools.push({ name: i === 0 ? 'echo' : 'tool_' + i, description: 'tool number ' + i,
    inputSchema: { type: 'object', properties: { text: { type: 'string', description: 'what to echo' } },
      required: ['text'] } });
const list = { tools };
let buf = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (!line) continue;
    const m = JSON.parse(line);
    if (m.id === undefined) continue;
    let result;
    if (m.method === 'initialize')
      result = { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
        serverInfo: { name: 'bench', version: '1' } };
    else if (m.method === 'tools/list') result = list;
    else if (m.method === 'tools/call')
      result = { content: [{ type: 'text', text: String(m.params.arguments.text) }] };
    else result = {};
    process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }) + '\n');
  }
});
process.stdin.on('end', () => process.exit(0));
