// A minimal MCP server over stdio (newline-delimited JSON-RPC, no SDK) with two tools:
// `connect {host, port}` opens a TCP connection itself, asks GET / (HTTP/1.0) and answers
// the status line or the error; `fetch {host, port}` asks the same through $HTTP_PROXY
// (the sandbox's egress proxy). tests/lua/mcp_spec.lua starts it confined (the sandbox's network
// namespace: no route out) and unconfined (the positive control).
'use strict';
const net = require('net');
const readline = require('readline');
const send = (m) => process.stdout.write(JSON.stringify(Object.assign({ jsonrpc: '2.0' }, m)) + '\n');
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch (e) { return; }
  if (m.method === 'initialize') {
    send({ id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
      serverInfo: { name: 'net', version: '1' } } });
  } else if (m.method === 'tools/list') {
    send({ id: m.id, result: { tools: [{ name: 'connect', description: 'opens a TCP connection',
      inputSchema: { type: 'object', properties: { host: { type: 'string' }, port: { type: 'number' } } } },
      { name: 'fetch', description: 'GET http://host:port/ through $HTTP_PROXY (absolute form)',
        inputSchema: { type: 'object', properties: { host: { type: 'string' }, port: { type: 'number' } } } }] } });
  } else if (m.method === 'tools/call' && m.params.name === 'fetch') {
    const { host, port } = m.params.arguments;
    const proxy = process.env.HTTP_PROXY ? new URL(process.env.HTTP_PROXY) : null;
    if (!proxy) { send({ id: m.id, result: { content: [{ type: 'text', text: 'error: no HTTP_PROXY' }], isError: true } }); return; }
    const s = net.connect({ host: proxy.hostname, port: +proxy.port, timeout: 5000 });
    let got = '';
    const done = (text, isError) => { s.destroy(); send({ id: m.id, result: { content: [{ type: 'text', text }], isError } }); };
    s.on('connect', () => s.write('GET http://' + host + ':' + port + '/ HTTP/1.1\r\nHost: ' + host + ':' + port + '\r\n\r\n'));
    s.on('data', (d) => { got += d; });
    s.on('end', () => done('fetched: ' + got.split('\r\n')[0], false));
    s.on('timeout', () => done('error: timeout', true));
    s.on('error', (e) => done('error: ' + e.code, true));
  } else if (m.method === 'tools/call') {
    const { host, port } = m.params.arguments;
    const s = net.connect({ host, port, timeout: 3000 });
    let got = '';
    const done = (text, isError) => { s.destroy(); send({ id: m.id, result: { content: [{ type: 'text', text }], isError } }); };
    s.on('connect', () => s.write('GET / HTTP/1.0\r\nHost: ' + host + ':' + port + '\r\n\r\n'));
    s.on('data', (d) => { got += d; });
    s.on('end', () => done('connected: ' + got.split('\r\n')[0], false));
    s.on('timeout', () => done('error: timeout', true));
    s.on('error', (e) => done('error: ' + e.code, true));
  } else if (m.id !== undefined) {
    send({ id: m.id, result: {} });
  }
});
