// The peer server of the MCP server bench (tests/bench/mcp_bench.py): the official
// TypeScript SDK (@modelcontextprotocol/sdk from build/npm) serving the one tool
// tests/bench/mcp_lua_server.lua serves, `echo {text}`, over stdio.
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
const s = new Server({ name: 'bench', version: '1' }, { capabilities: { tools: {} } });
s.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [{ name: 'echo', description: 'echoes',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }] }));
s.setRequestHandler(CallToolRequestSchema, async (r) => ({
  content: [{ type: 'text', text: String(r.params.arguments.text) }] }));
await s.connect(new StdioServerTransport());
