#!/usr/bin/env python3
"""A deterministic mock of OpenAI's chat completions endpoint, for the
session benchmark (tests/bench/session_bench.py). Run in its own process so
its CPU is not counted against either client:

  python3 mock_openai.py PORT      # prints "ready PORT" once it listens

POST /v1/chat/completions: when the last message is from the user it answers
with one call of the function "lookup" with {"q": "<the user's text>"}; when
the last message is a tool result it answers with a short final text. With
"stream": true the answer is a text/event-stream shaped like OpenAI's (a role
chunk, content or tool-call argument deltas, a finish chunk, a usage chunk
with empty choices, "data: [DONE]"), sent one event at a time in HTTP chunks;
without it, one chat.completion JSON object.

GET /stats returns {"requests", "messages", "tool_calls", "texts", "bad"}
counted since the last GET /stats (and resets them): the harness uses it to
check that both clients sent the same conversations.
"""
import http.server
import json
import socket
import sys
import threading

LOCK = threading.Lock()
STATS = {"requests": 0, "messages": 0, "tool_calls": 0, "texts": 0, "bad": 0}
COUNTER = [0]


def text_of(msg):
    c = msg.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def next_id():
    with LOCK:
        COUNTER[0] += 1
        return COUNTER[0]


def answer(body):
    """The response for one request: ("tool", q) or ("text", words)."""
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    if last.get("role") == "tool":
        q = ""
        for m in reversed(msgs):
            if m.get("role") == "user":
                q = text_of(m)
                break
        return "text", ["The", " answer", " for", " '" + q[:40] + "'", " is", " 42", "."]
    return "tool", text_of(last)[:40]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path != "/stats":
            self.send_error(404)
            return
        with LOCK:
            data = json.dumps(STATS).encode()
            for k in STATS:
                STATS[k] = 0
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            body = json.loads(raw)
            if not self.path.endswith("/chat/completions") or not isinstance(body.get("messages"), list):
                raise ValueError("not a chat completion request")
        except ValueError as e:
            with LOCK:
                STATS["bad"] += 1
            data = json.dumps({"error": {"message": str(e), "type": "invalid_request_error"}}).encode()
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        kind, what = answer(body)
        with LOCK:
            STATS["requests"] += 1
            STATS["messages"] += len(body["messages"])
            STATS["tool_calls" if kind == "tool" else "texts"] += 1
        n = next_id()
        prompt = max(1, len(raw) // 4)
        base = {"id": f"chatcmpl-mock{n}", "object": "chat.completion.chunk", "created": 1700000000,
                "model": body.get("model", "mock"), "service_tier": "default",
                "system_fingerprint": "fp_mock"}
        if kind == "tool":
            args = json.dumps({"q": what}, separators=(",", ":"))
            call_id = f"call_mock{n}"
            message = {"role": "assistant", "content": None, "refusal": None,
                       "tool_calls": [{"id": call_id, "type": "function",
                                       "function": {"name": "lookup", "arguments": args}}]}
            finish, completion = "tool_calls", max(1, len(args) // 4)
        else:
            message = {"role": "assistant", "content": "".join(what), "refusal": None}
            finish, completion = "stop", len(what)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                               "accepted_prediction_tokens": 0,
                                               "rejected_prediction_tokens": 0}}
        if not body.get("stream"):
            out = dict(base, object="chat.completion",
                       choices=[{"index": 0, "message": message, "logprobs": None,
                                 "finish_reason": finish}], usage=usage)
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def event(payload):
            data = ("data: " + payload + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def chunk(delta, finish_reason=None):
            d = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}])
            event(json.dumps(d, separators=(",", ":")))

        if kind == "tool":
            chunk({"role": "assistant", "content": None, "refusal": None,
                   "tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                   "function": {"name": "lookup", "arguments": ""}}]})
            for i in range(0, len(args), 8):
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 8]}}]})
        else:
            chunk({"role": "assistant", "content": "", "refusal": None})
            for w in what:
                chunk({"content": w})
        chunk({}, finish)
        event(json.dumps(dict(base, choices=[], usage=usage), separators=(",", ":")))
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 100 clients connect at once

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = Server(("127.0.0.1", port), Handler)
    print(f"ready {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
