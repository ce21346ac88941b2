// The peer HTTP server of the MCP server bench: the official TypeScript SDK's
// Streamable HTTP transport (sessions, as rig.mcp.server_http has them) on Node's
// http module, serving `echo {text}`. Prints its URL once listening.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
const transports = {};
function server() {
  const s = new Server({ name: 'bench', version: '1' }, { capabilities: { tools: {} } });
  s.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [{ name: 'echo', description: 'echoes',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }] }));
  s.setRequestHandler(CallToolRequestSchema, async (r) => ({
    content: [{ type: 'text', text: String(r.params.arguments.text) }] }));
  return s;
}
const srv = http.createServer(async (req, res) => {
  let body = '';
  for await (const chunk of req) body += chunk;
  const parsed = body ? JSON.parse(body) : undefined;
  const sid = req.headers['mcp-session-id'];
  let t = sid && transports[sid];
  if (!t) {
    t = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { transports[id] = t; } });
    await server().connect(t);
  }
  await t.handleRequest(req, res, parsed);
});
srv.listen(0, '127.0.0.1', () => console.log('http://127.0.0.1:' + srv.address().port + '/mcp'));
