#!/usr/bin/env python3
"""MCP bench. Client: a tools/call round trip to a stdio server (tests/bench/mcp_server.js,
plain Node, the same server for both) and listing 1,000 tools, luarig's rig.mcp against
the official TypeScript SDK client (@modelcontextprotocol/sdk from build/npm, make deps).
Server: the SDK client calling `echo` over stdio on rig.mcp.server
(tests/bench/mcp_lua_server.lua) against the SDK's own server (tests/bench/mcp_sdk_server.mjs).
Five runs of each; medians with min-max. Goal: client round trip <= 0.5x the SDK."""
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUARIG = os.environ.get("LUARIG", os.path.join(ROOT, "build", "luarig"))
NPM = os.path.join(ROOT, "build", "npm")
SERVER = os.path.join(ROOT, "tests", "bench", "mcp_server.js")
RUNS, CALLS, TOOLS, LISTS, HTTP_CALLS = 5, 2000, 1000, 20, 200


def line(name, value, unit, peer, peer_value, spread):
    ratio = value / peer_value if peer_value else float("inf")
    print(f"BENCH name={name} value={value:.6g} unit={unit} peer={peer} "
          f"peer_value={peer_value:.6g} ratio={ratio:.3f}", flush=True)
    print(f"# mcp bench: {name}: {spread}", flush=True)


def run(argv, cwd=None):
    r = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600)
    if r.returncode != 0:
        print("# mcp bench: failed: " + " ".join(argv[:2]) + ": " + r.stderr.strip()[-300:], flush=True)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    sdk = os.path.join(NPM, "node_modules", "@modelcontextprotocol", "sdk", "package.json")
    if not shutil.which("node") or not os.path.exists(sdk):
        print("# mcp bench: skipped (no node or no build/npm: make deps)", flush=True)
        return
    version = json.load(open(sdk))["version"]
    peer_script = os.path.join(NPM, "mcp_sdk_client.mjs")
    shutil.copy(os.path.join(ROOT, "tests", "bench", "mcp_sdk_client.mjs"), peer_script)
    ours, theirs = [], []
    for _ in range(RUNS):
        a = run([LUARIG, os.path.join(ROOT, "tests", "bench", "mcp_client.lua"), SERVER,
                 str(CALLS), str(TOOLS), str(LISTS)])
        b = run(["node", peer_script, SERVER, str(CALLS), str(TOOLS), str(LISTS)], cwd=NPM)
        if a and b:
            ours.append(a)
            theirs.append(b)
    if not ours:
        return
    peer = f"ts-sdk-{version}"
    for key, name, unit in (("call_us", "mcp_tools_call_roundtrip_stdio", "us"),
                            ("list_ms", "mcp_tools_list_1000", "ms")):
        x = [r[key] for r in ours]
        y = [r[key] for r in theirs]
        spread = (f"luarig median {statistics.median(x):.4g} (min {min(x):.4g}, max {max(x):.4g}), "
                  f"{peer} median {statistics.median(y):.4g} (min {min(y):.4g}, max {max(y):.4g}), "
                  f"{len(x)} runs")
        line(name, statistics.median(x), unit, peer, statistics.median(y), spread)
    # the server side: one client (the SDK's), two servers
    call = os.path.join(NPM, "mcp_sdk_call.mjs")
    peer_server = os.path.join(NPM, "mcp_sdk_server.mjs")
    shutil.copy(os.path.join(ROOT, "tests", "bench", "mcp_sdk_call.mjs"), call)
    shutil.copy(os.path.join(ROOT, "tests", "bench", "mcp_sdk_server.mjs"), peer_server)
    lua_server = os.path.join(ROOT, "tests", "bench", "mcp_lua_server.lua")
    sx, sy = [], []
    for _ in range(RUNS):
        a = run(["node", call, str(CALLS), LUARIG, lua_server], cwd=NPM)
        b = run(["node", call, str(CALLS), "node", peer_server], cwd=NPM)
        if a and b:
            sx.append(a["call_us"])
            sy.append(b["call_us"])
    if sx:
        peer_s = f"ts-sdk-server-{version}"
        spread = (f"rig.mcp.server median {statistics.median(sx):.4g} (min {min(sx):.4g}, max {max(sx):.4g}), "
                  f"{peer_s} median {statistics.median(sy):.4g} (min {min(sy):.4g}, max {max(sy):.4g}), "
                  f"{len(sx)} runs, the SDK client calling both")
        line("mcp_server_tools_call_roundtrip_stdio", statistics.median(sx), "us", peer_s,
             statistics.median(sy), spread)
    # and over Streamable HTTP: the servers listen on 127.0.0.1:0 and print their URL
    hcall = os.path.join(NPM, "mcp_sdk_http_call.mjs")
    hpeer = os.path.join(NPM, "mcp_sdk_http_server.mjs")
    shutil.copy(os.path.join(ROOT, "tests", "bench", "mcp_sdk_http_call.mjs"), hcall)
    shutil.copy(os.path.join(ROOT, "tests", "bench", "mcp_sdk_http_server.mjs"), hpeer)
    lua_http = os.path.join(ROOT, "tests", "bench", "mcp_lua_http_server.lua")
    hx, hy = [], []
    for _ in range(RUNS):
        got = []
        for argv in ([LUARIG, lua_http], ["node", hpeer]):
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=NPM)
            try:
                url = p.stdout.readline().strip()
                got.append(run(["node", hcall, str(HTTP_CALLS), url], cwd=NPM) if url else None)
            finally:
                p.terminate()
                p.wait(10)
        if got[0] and got[1]:
            hx.append(got[0]["call_us"])
            hy.append(got[1]["call_us"])
    if hx:
        peer_h = f"ts-sdk-http-server-{version}"
        spread = (f"rig.mcp.server median {statistics.median(hx):.4g} (min {min(hx):.4g}, max {max(hx):.4g}), "
                  f"{peer_h} median {statistics.median(hy):.4g} (min {min(hy):.4g}, max {max(hy):.4g}), "
                  f"{len(hx)} runs, the SDK client (Streamable HTTP) calling both; most of either figure "
                  f"is that client's own time")
        line("mcp_server_tools_call_roundtrip_http", statistics.median(hx), "us", peer_h,
             statistics.median(hy), spread)
    x = [r["tools_ms"] for r in ours]
    print(f"# mcp bench: mapping 1,000 MCP tools to rig tools (c:tools()): median {statistics.median(x):.4g} ms "
          f"(min {min(x):.4g}, max {max(x):.4g})", flush=True)


if __name__ == "__main__":
    main()
