/*
 * host.h — the C runtime under the Lua layer, one header per module; this
 * one includes them all, for lua/ and the tests:
 *
 *   loop.h          one libevent loop on the main thread: timers, fd
 *                   watches, signals, deferred calls, the worker pool
 *   session.h       sessions: lease, journal, emission queue, subscriptions,
 *                   the catalog writer
 *   session_pipe.h  a session's events streamed to an HTTP response as SSE
 *   sse.h           the text/event-stream push parser
 *   mcp_frame.h     the MCP stdio transport's line framing
 *   http_client.h   HTTP(S) requests over libcurl multi, on the loop
 *   http_server.h   the HTTP/1.1 server and its head parser
 *   proc.h          process supervision (posix_spawn, pipes, timeouts)
 *   egress.h        the egress proxy serving a sandbox's network boundary
 *   bundle.h        the bundle reader and writer (gzip tar)
 *   executor.h      sandboxed executors: running the confinement helper
 *
 * Files of host/ include the headers they use, not this one. Never includes
 * lua.h. Everything here runs on the loop's thread except a work item's
 * work() function, which runs on a pool thread and must not touch anything
 * but its own item.
 */
#ifndef LR_HOST_H
#define LR_HOST_H

#include "loop.h"
#include "session.h"
#include "session_pipe.h"
#include "sse.h"
#include "mcp_frame.h"
#include "http_client.h"
#include "http_server.h"
#include "proc.h"
#include "egress.h"
#include "bundle.h"
#include "executor.h"

#endif
