"""A forward-auth peer that behaves as oauth2-proxy's endpoints do, for the
gateway's external-auth tests: `forward_auth.py [--allow-host NAME]...
[--tls-cert CERT --tls-key KEY]`. Binds 127.0.0.1 on a free port (HTTPS
with the PEM certificate and key when given, control calls too), prints
`listening on PORT` once ready and serves until killed. HTTP/1.1 with a Content-Length on every answer, so a
client keeps its connection for the next request, as with the real one.
Python 3 standard library only.

  GET|HEAD|POST /oauth2/auth    the auth check. The session is the value of
      cookie `_oauth2_proxy`, or else of `Authorization: Bearer <session>`
      (API clients). A known session: 202, empty body, X-Auth-Request-User,
      X-Auth-Request-Email, X-Auth-Request-Groups (and, when the session was
      registered with refresh=1, `Set-Cookie: _oauth2_proxy=<same>; Path=/;
      HttpOnly`). Anything else: 401, empty body, `WWW-Authenticate: Bearer
      realm="sso"`. Every call is counted and the last one's request line and
      headers kept; more than 8 Cookie lines get 431, as header limits do.
      Modes (see /control/mode): ok (the default), slow (sleep ms
      milliseconds, then as ok), error (500), refuse (403 for everyone),
      bad-request (400 for everyone).
  GET /oauth2/start?rd=URL      sign-in. rd an absolute http(s) URL whose
      host (no port) is one of the --allow-host names: 302 to rd with
      `Set-Cookie: _oauth2_proxy=<sign-in session>; Path=/; HttpOnly` (no
      Set-Cookie while no sign-in session is set). Otherwise 400 `rd refused`.
  Control, answering JSON:
      POST /control/session?id=S&user=U&email=E&groups=G[&refresh=1]
      POST /control/signin-user?session=S
      POST /control/mode?m=ok|slow|error|refuse|bad-request[&ms=N]
      GET  /control/calls          {"calls": N}, calls to /oauth2/auth only
      POST /control/reset          zeroes the count
      GET  /control/last           {"request_line": ..., "headers":
                                   [[name, value], ...]} of the last
                                   /oauth2/auth call, names as received
"""

import argparse
import http.server
import json
import ssl
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

COOKIE = "_oauth2_proxy"
MODES = ("ok", "slow", "error", "refuse", "bad-request")


class State:
    def __init__(self, allow_hosts):
        self.lock = threading.Lock()
        self.allow_hosts = {h.lower() for h in allow_hosts}
        self.sessions = {}  # id -> dict(user, email, groups, refresh)
        self.signin_session = None
        self.mode = "ok"
        self.slow_ms = 0
        self.calls = 0
        self.last = {"request_line": "", "headers": []}


STATE = None


def session_of(headers):
    """The session a request presents: cookie first, then a bearer token."""
    for value in headers.get_all("Cookie") or []:
        for part in value.split(";"):
            name, sep, val = part.strip().partition("=")
            if sep and name.strip() == COOKIE:
                val = val.strip()
                if len(val) >= 2 and val[0] == val[-1] == '"':
                    val = val[1:-1]
                return val
    auth = headers.get("Authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def cookie_header(session):
    return f"{COOKIE}={session}; Path=/; HttpOnly"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def version_string(self):
        return "oauth2-proxy-peer"

    def log_message(self, format, *args):  # silence per-request logging
        pass

    # -- plumbing ---------------------------------------------------------

    def drain_body(self):
        length = self.headers.get("Content-Length")
        if length:
            try:
                n = int(length)
            except ValueError:
                n = 0
            while n > 0:
                chunk = self.rfile.read(min(n, 65536))
                if not chunk:
                    break
                n -= len(chunk)
        elif "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            while True:
                size_line = self.rfile.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the empty line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                self.rfile.read(size + 2)

    def answer(self, status, headers=(), body=b"", content_type=None):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if content_type and body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.wfile.flush()

    def json(self, status, obj):
        self.answer(status, body=json.dumps(obj), content_type="application/json")

    def route(self):
        self.drain_body()
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        q = lambda k, d=None: query.get(k, [d])[0]
        path = url.path
        method = self.command
        if path == "/oauth2/auth":
            if method in ("GET", "HEAD", "POST"):
                return self.auth()
            return self.answer(405, [("Allow", "GET, HEAD, POST")])
        if path == "/oauth2/start":
            if method in ("GET", "HEAD"):
                return self.start(q("rd"))
            return self.answer(405, [("Allow", "GET, HEAD")])
        if path.startswith("/control/"):
            return self.control(path[len("/control/"):], q)
        return self.answer(404, body="not found", content_type="text/plain")

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = route

    # -- /oauth2/auth -----------------------------------------------------

    def auth(self):
        with STATE.lock:
            STATE.calls += 1
            STATE.last = {
                "request_line": self.requestline,
                "headers": [[k, v] for k, v in self.headers.items()],
            }
            mode, slow_ms = STATE.mode, STATE.slow_ms
        if mode == "slow" and slow_ms > 0:
            time.sleep(slow_ms / 1000.0)
        # As many auth services do past their header limits (Go's
        # net/http, nginx's large_client_header_buffers): 431.
        if len(self.headers.get_all("Cookie") or []) > 8:
            return self.answer(431, body="too many cookie lines", content_type="text/plain")
        if mode == "error":
            return self.answer(500, body="error", content_type="text/plain")
        if mode == "refuse":
            return self.answer(403)
        if mode == "bad-request":
            return self.answer(400, body="bad request", content_type="text/plain")
        session = session_of(self.headers)
        with STATE.lock:
            found = STATE.sessions.get(session) if session is not None else None
        if found is None:
            return self.answer(401, [("WWW-Authenticate", 'Bearer realm="sso"')])
        headers = [
            ("X-Auth-Request-User", found["user"]),
            ("X-Auth-Request-Email", found["email"]),
            ("X-Auth-Request-Groups", found["groups"]),
        ]
        if found["refresh"]:
            headers.append(("Set-Cookie", cookie_header(session)))
        return self.answer(202, headers)

    # -- /oauth2/start ----------------------------------------------------

    def start(self, rd):
        if not rd or not allowed(rd):
            return self.answer(400, body="rd refused", content_type="text/plain")
        headers = [("Location", rd)]
        with STATE.lock:
            signin = STATE.signin_session
        if signin is not None:
            headers.append(("Set-Cookie", cookie_header(signin)))
        return self.answer(302, headers)

    # -- /control ---------------------------------------------------------

    def control(self, what, q):
        if what == "session":
            sid = q("id")
            if not sid:
                return self.json(400, {"error": "id is required"})
            with STATE.lock:
                STATE.sessions[sid] = {
                    "user": q("user", ""),
                    "email": q("email", ""),
                    "groups": q("groups", ""),
                    "refresh": q("refresh") in ("1", "true", "yes"),
                }
            return self.json(200, {"ok": True, "session": sid})
        if what == "signin-user":
            sid = q("session")
            if not sid:
                return self.json(400, {"error": "session is required"})
            with STATE.lock:
                STATE.signin_session = sid
            return self.json(200, {"ok": True, "session": sid})
        if what == "mode":
            m = q("m")
            if m not in MODES:
                return self.json(400, {"error": f"m must be one of {MODES}"})
            try:
                ms = int(q("ms", "0") or "0")
            except ValueError:
                return self.json(400, {"error": "ms must be an integer"})
            with STATE.lock:
                STATE.mode, STATE.slow_ms = m, max(ms, 0)
            return self.json(200, {"ok": True, "mode": m, "ms": max(ms, 0)})
        if what == "calls":
            with STATE.lock:
                calls = STATE.calls
            return self.json(200, {"calls": calls})
        if what == "reset":
            with STATE.lock:
                STATE.calls = 0
            return self.json(200, {"ok": True})
        if what == "last":
            with STATE.lock:
                last = {
                    "request_line": STATE.last["request_line"],
                    "headers": [list(h) for h in STATE.last["headers"]],
                }
            return self.json(200, last)
        return self.json(404, {"error": f"no control {what!r}"})


def allowed(rd):
    """An absolute http(s) URL whose host (without port) is allowed."""
    try:
        url = urlsplit(rd)
        host = url.hostname  # lowercased, port and brackets removed
    except ValueError:
        return False
    if url.scheme.lower() not in ("http", "https") or not url.netloc or not host:
        return False
    return host in STATE.allow_hosts


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client gone away
        pass


def main():
    global STATE
    parser = argparse.ArgumentParser(description="oauth2-proxy-like forward-auth peer")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME")
    parser.add_argument("--tls-cert", metavar="CERT")
    parser.add_argument("--tls-key", metavar="KEY")
    args = parser.parse_args()
    STATE = State(args.allow_host)
    server = Server(("127.0.0.1", 0), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
