"""What every console suite (tests/console/*_test.py) shares: a headless
Chromium driven over the DevTools protocol on --remote-debugging-pipe (fds 3
and 4, NUL-terminated JSON; nothing downloaded, no websocket library), `luarig
serve` started on a rig with a bearer token, the page signed in with it, the
HTTP API, and one way to run a suite and report it as TAP.

A suite is a Suite("console NAME") whose run(start, body) finds Chromium and
luarig, makes a private temporary folder, calls start(suite) to start the
server(s) (suite.serve) and get the base URL, opens the browser and calls
body(suite, chrome, base). A Step raised anywhere ends the suite as a failed
line; on the way out the browser is closed, every server the suite started
gets SIGTERM and must exit 143 (its log is shown when it does not), and the
folder goes.
"""
import base64
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

ROOT = os.environ.get("LUARIG_ROOT") or os.getcwd()
BUILD = os.environ.get("BUILD", "build")
LUARIG = os.environ.get("LUARIG") or os.path.join(ROOT, BUILD, "luarig")
ARTIFACTS = os.path.join(ROOT, "build", "artifacts")
TOKEN = "console-test-token-0123456789"
# the condition sign_in waits for by default: the page has read the session list
CONNECTED = "document.getElementById('conn').textContent === 'connected'"


class Step(Exception):
    """A step of a suite could not be taken: the rest of it cannot run."""


class Chrome:
    """A headless Chromium and one page, spoken to over the pipe."""

    def __init__(self, exe, tmp):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe",
                "--user-data-dir=" + os.path.join(tmp, "profile"),
                "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", "--mute-audio",
                "--disable-dev-shm-usage",
                # the attack page's name: a relay on 127.0.0.2 (see Relay)
                "--host-resolver-rules=MAP attacker.example 127.0.0.2",
                "--hide-scrollbars", "--window-size=1280,820", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")
        self.log = open(os.path.join(tmp, "chromium.log"), "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.replies = {}
        self.cv = threading.Condition()
        self.events = queue.Queue()
        self.requests = []  # Network.requestWillBeSent params, in order
        self.errors = []    # exceptions, console errors, CSP violations
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.session = None

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.from_chrome, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.replies["eof"] = True
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self.cv:
                        self.replies[msg["id"]] = msg
                        self.cv.notify_all()
                else:
                    m, p = msg.get("method"), msg.get("params", {})
                    if m == "Network.requestWillBeSent":
                        self.requests.append(p)
                    elif m == "Runtime.exceptionThrown":
                        self.errors.append(json.dumps(p.get("exceptionDetails"))[:300])
                    elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                        self.errors.append(json.dumps(p.get("args"))[:300])
                    elif m == "Log.entryAdded" and p["entry"].get("source") in ("security",
                                                                                "javascript"):
                        self.errors.append(p["entry"].get("text", "")[:300])
                    self.events.put(msg)

    def call(self, method, params=None, session=True, timeout=15):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        try:
            os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise Step("chromium closed the pipe (see chromium.log): %s" % e)
        deadline = time.time() + timeout
        with self.cv:
            while mid not in self.replies:
                if self.replies.get("eof"):
                    raise Step("chromium closed the pipe (see chromium.log)")
                left = deadline - time.time()
                if left <= 0:
                    raise Step("no answer to " + method)
                self.cv.wait(left)
            reply = self.replies.pop(mid)
        if "error" in reply:
            raise Step(method + ": " + json.dumps(reply["error"]))
        return reply.get("result", {})

    def open_page(self):
        # a browser just started under load can take long over its first page
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False, timeout=60)
        att = self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True},
                        session=False)
        self.session = att["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 820, "deviceScaleFactor": 1, "mobile": False})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise Step("page error in `" + expr[:80] + "`: " +
                       json.dumps(r["exceptionDetails"].get("exception", {}).get("description")
                                  or r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def wait(self, expr, what, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.eval("!!(" + expr + ")"):
                return True
            time.sleep(0.05)
        raise Step("timed out waiting for " + what)

    def click(self, selector):
        """A real mouse click at the centre of the element."""
        pos = self.eval("(() => { const e = document.querySelector(%s); if (!e) return null;"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()" % json.dumps(selector))
        if not pos:
            raise Step("nothing to click at " + selector)
        x, y = pos
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for t in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": t, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1})

    def type(self, selector, text):
        self.click(selector)
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


def http(url, token=None, method="GET", body=None):
    req = urllib.request.Request(url, method=method, data=body)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if method == "POST":
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def api(base, method, path, body=None):
    """One call of the HTTP API with the token: (status, the JSON answer, or its bytes when it
    is not JSON)."""
    status, _, data = http(base + path, TOKEN, method,
                           json.dumps(body).encode() if body is not None else None)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, data


def sign_in(c, base, then=CONNECTED, what="the session list"):
    """Opens the console at base in a new page, gives it the token and waits for then."""
    c.open_page()
    c.call("Page.navigate", {"url": base + "/"})
    c.wait("document.readyState === 'complete' && !document.getElementById('auth').hidden",
           "the token form")
    c.type("#token", TOKEN)
    c.click("#token-save")
    c.wait(then, what)


def chromium():
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Suite:
    """One console suite: its TAP lines ("ok - NAME: …"), its servers and its folder."""

    def __init__(self, name, failure_png=None):
        self.name = name
        self.failure_png = failure_png  # a screenshot in build/artifacts/ when a step fails
        self.failed = 0
        self.tmp = None
        self.servers = []  # [proc, log_path, stopped], in the order started
        self.log_path = None  # the last server's log, shown when a step fails

    def ok(self, cond, name, detail=""):
        if cond:
            print("ok - %s: %s" % (self.name, name), flush=True)
        else:
            self.failed += 1
            print("not ok - %s: %s%s" % (self.name, name, ": " + detail if detail else ""), flush=True)
        return cond

    def serve(self, rig, name="serve", token=True, env=None, timeout=10):
        """Starts `luarig serve rig` (a path under the repository) on a free port, with the
        token unless token is false, and env added to the environment; returns its base URL
        and its process. It logs to name.log in the suite's folder."""
        args = [LUARIG, "serve", os.path.join(ROOT, rig), "--listen", "127.0.0.1:0"]
        if token:
            token_file = os.path.join(self.tmp, "token")
            with open(token_file, "w") as f:
                f.write(TOKEN + "\n")
            args += ["--auth-token-file", token_file]
        log_path = os.path.join(self.tmp, name + ".log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    cwd=ROOT, env=dict(os.environ, **(env or {})))
        self.servers.append([proc, log_path, False])
        self.log_path = log_path
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(log_path) as f:
                for line in f:
                    if line.startswith("luarig: serving on "):
                        return line.split()[3], proc
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        self.crash(proc)
        with open(log_path) as f:
            raise Step("luarig serve did not start: " + f.read()[-500:])

    def crash(self, proc):
        """SIGKILL for a server the suite started: no exit status is asked of it."""
        proc.kill()
        proc.wait()
        for s in self.servers:
            if s[0] is proc:
                s[2] = True

    def stop(self, proc):
        """SIGTERM for a server the suite started: it must exit 143, its log is shown if not."""
        for s in self.servers:
            if s[0] is proc and not s[2]:
                s[2] = True
                self._stop(proc, s[1])

    def _stop(self, proc, log_path):
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        if rc != 143:
            with open(log_path, errors="replace") as f:
                sys.stderr.write(f.read()[-3000:])
        self.ok(rc == 143, "luarig serve (%s) shuts down cleanly on SIGTERM (exit 143)"
                % os.path.basename(log_path)[:-4], "exit %s" % rc)

    def run(self, start, body):
        """Runs the suite (see the module's comment); returns its exit status."""
        exe = chromium()
        if not exe:
            print("not ok - %s: chromium not found (tools/deps.sh installs Debian's chromium)"
                  % self.name)
            return 1
        if not os.access(LUARIG, os.X_OK):
            print("not ok - %s: no luarig at %s" % (self.name, LUARIG))
            return 1
        self.tmp = tempfile.mkdtemp(prefix="luarig-%s-" % self.name.replace(" ", "-"))
        os.chmod(self.tmp, 0o700)
        chrome = None
        try:
            base = start(self)
            chrome = Chrome(exe, self.tmp)
            try:
                body(self, chrome, base)
            except Step as e:
                self.ok(False, "the suite stopped", str(e))
                if self.failure_png:
                    try:
                        chrome.screenshot(os.path.join(ARTIFACTS, self.failure_png))
                    except Exception:
                        pass
                if self.log_path:
                    with open(self.log_path, errors="replace") as f:
                        sys.stderr.write(f.read()[-2000:])
        except Step as e:
            self.ok(False, "setting up", str(e))
        except Exception as e:  # a bug in the suite: a failure too, with its traceback
            traceback.print_exc()
            self.ok(False, "the suite raised", repr(e))
        finally:
            if chrome:
                chrome.close()
            for proc, log_path, stopped in self.servers:
                if not stopped:
                    self._stop(proc, log_path)
            shutil.rmtree(self.tmp, ignore_errors=True)
        return 1 if self.failed else 0
