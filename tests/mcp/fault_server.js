// A misbehaving MCP stdio server for tests/lua/mcp_spec.lua. argv[2] picks the fault a
// tools/call of the tool "go" shows; initialize and tools/list always work.
//   crash      exits (code 3) in the middle of the call, after writing half a line
//   hang       never answers the call (and ignores notifications/cancelled)
//   flood      sends 20000 notifications/message, then the answer
//   malformed  sends garbage, JSON that is not JSON-RPC, a response to an unknown id,
//              a response with both result and error for another id, then the answer
//   huge       answers with one line of 24 MiB (over the client's 16 MiB cap), then
//              answers the next call normally
//   progress   sends 3 progress notifications 100 ms apart, then the answer
'use strict';
const mode = process.argv[2] || 'crash';
let buf = '';
let calls = 0;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    handle(JSON.parse(line));
  }
});
process.stdin.on('end', () => process.exit(0));
function handle(m) {
  if (m.method === 'initialize') {
    out({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: 'fault-' + mode, version: '1' } } });
  } else if (m.method === 'tools/list') {
    out({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'go', description: 'misbehaves',
      inputSchema: { type: 'object', properties: {} } }] } });
  } else if (m.method === 'tools/call') {
    calls++;
    const ok = (text) => out({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text }] } });
    if (mode === 'crash') {
      process.stdout.write('{"jsonrpc":"2.0","id":' + m.id + ',"res', () => process.exit(3));
    } else if (mode === 'hang') {
      // nothing
    } else if (mode === 'flood') {
      for (let k = 0; k < 20000; k++)
        out({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'flood ' + k } });
      ok('after the flood');
    } else if (mode === 'malformed') {
      process.stdout.write('this is not json\n');
      process.stdout.write('{"jsonrpc":"1.0","id":' + m.id + ',"result":{}}\n');
      process.stdout.write('[]\n');
      out({ jsonrpc: '2.0', id: 999999, result: {} });
      out({ jsonrpc: '2.0', id: 'x', result: {}, error: { code: 1, message: 'both' } });
      out({ jsonrpc: '2.0', method: 42 });
      ok('still here');
    } else if (mode === 'huge' && calls === 1) {
      const big = 'x'.repeat(24 << 20);
      process.stdout.write('{"result":{"content":[{"type":"text","text":"' + big + '"}]},"jsonrpc":"2.0","id":' + m.id + '}\n');
    } else if (mode === 'progress') {
      const tok = m.params._meta && m.params._meta.progressToken;
      let n = 0;
      const tick = () => {
        if (n < 3) {
          n++;
          out({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: tok, progress: n, total: 3 } });
          setTimeout(tick, 100);
        } else ok('progressed');
      };
      tick();
    } else {
      ok('fine');
    }
  } else if (m.id !== undefined && m.method) {
    out({ jsonrpc: '2.0', id: m.id, result: {} });
  }
}
