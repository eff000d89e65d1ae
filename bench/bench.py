#!/usr/bin/env python3
"""Side-by-side benchmark of fairgate against nginx and HAProxy.

Every target fronts the same nginx static upstream and gets one worker
thread, pinned to CPU 1; the load generator (wrk -t1 -c32), the upstream and
Redis share CPU 0. Targets run interleaved, round after round, so drift in
the machine hits them all alike. For each: requests/s, p50, p99 and the
server's CPU microseconds per request (utime+stime from /proc), all also as
ratios to nginx + limit_req. Writes docs/benchmarks.md and
docs/benchmarks.png. Run through bench/run, which builds and installs first.

To compare a change side by side without touching the docs (A/B mode):
  ONLY="nginx proxy,fairgate"      run only targets whose name contains one of these
  CANDIDATE=/path/to/fairgate      add every fairgate target again with this binary
  CANDIDATE_ENV="K=V K2=V2"        environment for the candidate's processes
Either prints the medians and leaves docs/ alone.
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where bench/run built the binaries: target/release, or target/debug with
# BENCH_PROFILE=dev (CI: the script runs end to end; its numbers mean nothing).
BUILD = ROOT / "target" / ("debug" if os.environ.get("BENCH_PROFILE") == "dev" else "release")
FAIRGATE = Path(os.environ.get("FAIRGATE_BENCH_BINARY", BUILD / "fairgate"))
PROFILE_NOTE = ", BENCH_PROFILE=dev: unoptimised, the numbers mean nothing" if BUILD.name == "debug" else ""
BARE_PINGORA = BUILD / "examples" / "bare_pingora"
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS = int(os.environ.get("SECONDS_PER", "5"))
CONNECTIONS = 32
TICK = os.sysconf("SC_CLK_TCK")
WORK = Path(tempfile.mkdtemp(prefix="fairgate-bench-"))
BASELINE = "nginx + limit_req"
# The fleet-wide baseline: what Kong's redis policy and APISIX limit-count do.
LUA_BASELINE = "nginx + Lua + Redis"
KEYS = ROOT / "tests" / "fixtures" / "keys"
TOKENS = BUILD / "examples" / "bench_tokens"
CLUSTER_BUILD = BUILD / "examples" / "cluster_build"
JWT_SECRET = "bench-only-secret-0123456789"
ALGORITHMS = ("HS256", "RS256", "ES256", "EdDSA")
ROTATING = 1000
MEMORY_STORE = "store: {kind: memory}\nacknowledge: [store.process_local]"
ONLY = [o.strip() for o in os.environ.get("ONLY", "").split(",") if o.strip()]
CANDIDATE = os.environ.get("CANDIDATE")
CANDIDATE_ENV = dict(kv.split("=", 1) for kv in os.environ.get("CANDIDATE_ENV", "").split())
procs = []


def free_port(cluster=False):
    """A free loopback port; for a Redis Cluster node, one whose cluster bus
    port (port + 10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster:
            return port
        if port + 10000 < 65536:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                pass


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    logs = "".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in WORK.glob(f"*{port}*.log"))
    sys.exit(f"nothing listening on {port}\n{logs}")


def start(cmd, cpu, env=None, name="proc"):
    log = open(WORK / f"{name}.log", "w")
    p = subprocess.Popen(["taskset", "-c", str(cpu)] + cmd, stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, **(env or {})}, cwd=WORK)
    procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tree(pid):
    """pid and all its descendants (nginx master and worker, say)."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(d.name))
            except OSError:
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids, user_only=False):
    """utime+stime of `pids` (utime only with `user_only`), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + (0 if user_only else int(fields[12]))
        except OSError:
            pass
    return total / TICK


def write(name, text):
    path = WORK / name
    path.write_text(text)
    return path


def nginx_conf(port, body, main=""):
    """An nginx config of one worker; `main` goes before everything else."""
    return write(f"nginx-{port}.conf", f"""
{main}
worker_processes 1;
daemon off;
pid {WORK}/nginx-{port}.pid;
error_log {WORK}/nginx-{port}.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {WORK}/tmp-{port};
  proxy_temp_path {WORK}/tmp-{port};
  {body}
}}""")


def upstream(port):
    conf = nginx_conf(port, f"""
  server {{ listen 127.0.0.1:{port}; keepalive_requests 1000000;
    location / {{ return 200 "ok\\n"; }} }}""")
    return start(["nginx", "-c", str(conf)], 0, name="upstream")


def nginx_proxy(port, up, limit):
    zone = "limit_req_zone $http_x_tenant zone=t:10m rate=1000000r/s;" if limit else ""
    rule = "limit_req zone=t burst=1000000 nodelay;" if limit else ""
    conf = nginx_conf(port, f"""
  {zone}
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port}; keepalive_requests 1000000;
    location / {{ {rule} proxy_pass http://up; proxy_http_version 1.1;
      proxy_set_header Connection ""; }} }}""")
    return start(["nginx", "-c", str(conf)], 1, name=f"nginx-{port}")


def haproxy(port, up):
    conf = write(f"haproxy-{port}.cfg", f"""
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  stick-table type string len 64 size 200k expire 60s store http_req_rate(1s)
  http-request track-sc0 hdr(x-tenant)
  http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt 100000000 }}
  default_backend be
backend be
  http-reuse always
  server up 127.0.0.1:{up}
""")
    return start(["haproxy", "-f", str(conf)], 1, name=f"haproxy-{port}")


def fairgate(port, up, store, limits=True, capacity=1_000_000_000, rate="1000000/s",
             binary=FAIRGATE, env=None, extra=""):
    conf = write(f"fairgate-{port}.yaml", f"""
server: {{listen: ["127.0.0.1:{port}"], threads: 1, shutdown_grace: 1s}}
{store}
upstreams:
  api: {{targets: ["127.0.0.1:{up}"]}}
limits:
  api: {{scope: {{header: X-Tenant}}, default: {{capacity: {capacity}, rate: {rate}}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: none, limits: [{"api" if limits else ""}], client_ip_exempt: true}}
{extra}
""")
    return start([str(binary), "serve", "-c", str(conf)], 1, env={"RUST_LOG": "warn", **(env or {})},
                 name=f"fairgate-{port}")


def fairgate_auth(port, up, store, binary=FAIRGATE, env=None):
    """fairgate verifying a bearer JWT (any of the four algorithms) and
    spending a tenant-scoped bucket, as an authenticated API does."""
    conf = write(f"fairgate-{port}.yaml", f"""
server: {{listen: ["127.0.0.1:{port}"], threads: 1, shutdown_grace: 1s}}
{store}
auth:
  keys:
    - {{alg: HS256, secret_env: FAIRGATE_JWT_SECRET}}
    - {{alg: RS256, public_key_file: {KEYS}/rs256.pub.pem}}
    - {{alg: ES256, public_key_file: {KEYS}/es256.pub.pem}}
    - {{alg: EdDSA, public_key_file: {KEYS}/ed25519.pub.pem}}
upstreams:
  api: {{targets: ["127.0.0.1:{up}"]}}
limits:
  api: {{scope: tenant, default: {{capacity: 1000000000, rate: 1000000/s}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api]}}
""")
    return start([str(binary), "serve", "-c", str(conf)], 1,
                 env={"RUST_LOG": "warn", "FAIRGATE_JWT_SECRET": JWT_SECRET, **(env or {})},
                 name=f"fairgate-{port}")


def auth_service(port):
    """A forward-auth service as fast as nginx answers, on CPU 0 (beside
    the upstream, not the gateway): 202 with oauth2-proxy's identity
    headers for a request carrying a session cookie, 401 without."""
    conf = nginx_conf(port, f"""
  server {{ listen 127.0.0.1:{port}; keepalive_requests 1000000;
    location /oauth2/auth {{
      if ($cookie__oauth2_proxy = "") {{ return 401; }}
      add_header X-Auth-Request-User "ann" always;
      add_header X-Auth-Request-Groups "tenant-1" always;
      return 202; }} }}""")
    return start(["nginx", "-c", str(conf)], 0, name=f"auth-{port}")


def fairgate_external(port, up, store, auth_port, cache):
    """fairgate asking an external auth service (a subrequest per request,
    or one per session with the answer cache on) and spending the bucket
    of the tenant the answer names."""
    cached = ", cache: {cookie: _oauth2_proxy, ttl: 60s}" if cache else ""
    conf = write(f"fairgate-{port}.yaml", f"""
server: {{listen: ["127.0.0.1:{port}"], threads: 1, shutdown_grace: 1s}}
{store}
auth:
  methods:
    sso:
      external: {{url: "http://127.0.0.1:{auth_port}/oauth2/auth", response_headers: [X-Auth-Request-User, X-Auth-Request-Groups]{cached}}}
      identity: {{tenant: {{header: X-Auth-Request-Groups}}, user: {{header: X-Auth-Request-User}}}}
upstreams:
  api: {{targets: ["127.0.0.1:{up}"]}}
limits:
  api: {{scope: tenant, default: {{capacity: 1000000000, rate: 1000000/s}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: sso, limits: [api]}}
""")
    return start([str(FAIRGATE), "serve", "-c", str(conf)], 1, env={"RUST_LOG": "warn"},
                 name=f"fairgate-{port}")


def tokens(alg, count):
    """A file of `count` distinct tokens signed with `alg`."""
    path = WORK / f"tokens-{alg}-{count}.txt"
    if not path.exists():
        subprocess.run([str(TOKENS), str(KEYS), alg, str(count), str(path)], check=True,
                       env={**os.environ, "FAIRGATE_JWT_SECRET": JWT_SECRET})
    return path


def token_script(alg, count):
    """A wrk script sending the tokens of `tokens(alg, count)` in turn."""
    return write(f"tokens-{alg}-{count}.lua", f"""
local list = {{}}
for line in io.lines("{tokens(alg, count)}") do list[#list + 1] = line end
local i = 0
request = function()
  i = i % #list + 1
  wrk.headers["Authorization"] = "Bearer " .. list[i]
  return wrk.format(nil)
end
""")


def openresty(port, up, redis_port, sha, jwt=False):
    """nginx + Lua + Redis, the data plane of Kong's redis policy and APISIX
    limit-count: per request one EVALSHA of fairgate's own token_bucket.lua
    over a cosocket keepalive pool, same key shape, the two IETF headers.
    Fault tolerant as Kong's plugin is by default: when Redis does not
    answer within 50 ms the request passes unlimited (a loaded CI machine
    made the first version answer 503 to 54 of 863 requests).
    `jwt`: first verifies the bearer token on every request (bench/jwt.lua,
    OpenSSL through LuaJIT's FFI, as Kong's and APISIX's jwt plugins do)
    and spends the bucket of its `tid` claim."""
    setup = f"""init_worker_by_lua_block {{
    require("jwt").setup("{JWT_SECRET}", [[{(KEYS / "rs256.pub.pem").read_text()}]])
  }}"""
    verify = """local auth = ngx.var.http_authorization
        local claims = auth and require("jwt").verify(string.sub(auth, 8))
        if not claims or type(claims.tid) ~= "string" then return ngx.exit(401) end
        tenant = claims.tid"""
    modules = ("load_module /usr/lib/nginx/modules/ndk_http_module.so;\n"
               "load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;")
    conf = nginx_conf(port, f"""
  lua_package_path "{ROOT}/bench/?.lua;/usr/share/lua/5.1/?.lua;;";
  lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";
  {setup if jwt else ""}
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port}; keepalive_requests 1000000;
    location / {{
      access_by_lua_block {{
        local tenant = ngx.var.http_x_tenant
        {verify if jwt else ""}
        local sock = ngx.socket.tcp()
        sock:settimeout(50)
        local ok = sock:connect("127.0.0.1", {redis_port})
        if not ok then return end
        local key = "api:{{" .. (tenant or "%") .. "}}:rate"
        local args = {{"EVALSHA", "{sha}", "1", key, "1", "1000000000", "1", "0"}}
        local out = {{"*", #args, "\\r\\n"}}
        for _, a in ipairs(args) do
          out[#out + 1] = "$" .. #a .. "\\r\\n" .. a .. "\\r\\n"
        end
        if not sock:send(table.concat(out)) then return sock:close() end
        local head = sock:receive()
        if head ~= "*4" then return sock:close() end
        local v = {{}}
        for i = 1, 4 do
          local line = sock:receive()
          if not line then return sock:close() end
          v[i] = tonumber(string.sub(line, 2))
        end
        sock:setkeepalive(10000, 64)
        if v[1] ~= 1 then return ngx.exit(429) end
        ngx.ctx.rl = v
      }}
      header_filter_by_lua_block {{
        local v = ngx.ctx.rl
        if v then
          ngx.header["RateLimit-Policy"] = '"api";q=1000000000;w=1000'
          ngx.header["RateLimit"] = '"api";r=' .. v[2] .. ';t=' .. math.ceil(v[4] / 1000)
        end
      }}
      proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
    }} }}""", main=modules)
    return start(["nginx", "-c", str(conf)], 1, name=f"nginx-{port}")


def otlp_sink(port):
    """A collector stand-in on CPU 0: reads every OTLP/HTTP export and
    answers 200, so a traced target pays for making and sending spans."""
    code = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""
    return start([sys.executable, "-c", code, str(port)], 0, name="otlp-sink")


def bare_pingora(port, up):
    return start([str(BARE_PINGORA), f"127.0.0.1:{port}", f"127.0.0.1:{up}"], 1,
                 name=f"bare-{port}")


def redis_store(port):
    return f'store: {{kind: redis, url: "redis://127.0.0.1:{port}/0"}}'


def redis_server(port, cluster=False, replicaof=None):
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(WORK)]
    if replicaof:
        args += ["--replicaof", "127.0.0.1", str(replicaof)]
    if cluster:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
    p = start(args, 0, name=f"redis-{port}")
    wait_port(port)
    return p


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def wrk(port, seconds, script=None, headers=(), name=None):
    cmd = ["taskset", "-c", "0", "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency",
           "-H", "X-Tenant: tenant-1"]
    for h in headers:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", str(script)]
    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                         check=True).stdout

    def latency(q):
        m = re.search(rf"^\s+{q}%\s+([\d.]+)(us|ms|s)", out, re.M)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v

    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        sys.exit(f"{name or 'port'} (port {port}): {non2xx.group(1)} non-2xx responses; "
                 f"a limit refused or a peer failed\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return requests, rps, latency(50), latency(99)


def main():
    up_port = free_port()
    upstream(up_port)
    wait_port(up_port)

    redis_port = free_port()
    redis_server(redis_port)
    # store.durability: replicated waits for a replica: a master of its own
    # with one replica beside it, so the other Redis targets replicate nothing.
    durable_port, replica_port = free_port(), free_port()
    redis_server(durable_port)
    redis_server(replica_port, replicaof=durable_port)
    for _ in range(100):
        if "master_link_status:up" in redis_cli(replica_port, "INFO", "replication"):
            break
        time.sleep(0.1)
    cluster_ports = []
    while len(cluster_ports) < 3:
        p = free_port(cluster=True)
        if p not in cluster_ports and p + 10000 not in cluster_ports:
            cluster_ports.append(p)
    for p in cluster_ports:
        redis_server(p, cluster=True)
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in cluster_ports],
                    "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, check=True)
    for _ in range(100):
        if all("cluster_state:ok" in redis_cli(p, "CLUSTER", "INFO") for p in cluster_ports):
            break
        time.sleep(0.1)

    otlp_port = free_port()
    otlp_sink(otlp_port)
    wait_port(otlp_port)
    traced = f'telemetry: {{otlp: {{endpoint: "http://127.0.0.1:{otlp_port}"}}}}'
    sampled = f'telemetry: {{otlp: {{endpoint: "http://127.0.0.1:{otlp_port}"}}, sampling: {{ratio: 0.01}}}}'

    memory = MEMORY_STORE
    redis = redis_store(redis_port)
    durable = (f'store: {{kind: redis, url: "redis://127.0.0.1:{durable_port}/0", '
               f'durability: replicated}}')
    sha = redis_cli(redis_port, "SCRIPT", "LOAD", (ROOT / "lua" / "token_bucket.lua").read_text()).strip()
    nodes = ", ".join(f'"redis://127.0.0.1:{p}"' for p in cluster_ports)
    cluster = f"store: {{kind: redis_cluster, nodes: [{nodes}]}}"
    targets = [
        ("upstream direct", lambda p: None, []),
        ("nginx proxy", lambda p: nginx_proxy(p, up_port, False), []),
        (BASELINE, lambda p: nginx_proxy(p, up_port, True), []),
        ("HAProxy + stick table", lambda p: haproxy(p, up_port), []),
        ("bare Pingora proxy", lambda p: bare_pingora(p, up_port), []),
        ("fairgate, no limits", lambda p: fairgate(p, up_port, memory, limits=False), []),
        ("fairgate, memory store", lambda p: fairgate(p, up_port, memory), []),
        ("fairgate, Redis", lambda p: fairgate(p, up_port, redis), [redis_port]),
        ("fairgate, Redis Cluster", lambda p: fairgate(p, up_port, cluster), cluster_ports),
        ("fairgate, Redis, replicated durability",
         lambda p: fairgate(p, up_port, durable), [durable_port, replica_port]),
        ("fairgate, Redis, every request traced",
         lambda p: fairgate(p, up_port, redis, extra=traced), [redis_port]),
        ("fairgate, Redis, 1% of traces sampled",
         lambda p: fairgate(p, up_port, redis, extra=sampled), [redis_port]),
        (LUA_BASELINE, lambda p: openresty(p, up_port, redis_port, sha), [redis_port]),
    ]
    for alg in ("HS256", "RS256"):
        targets.append((f"{LUA_BASELINE}, one {alg} token verified per request",
                        lambda p: openresty(p, up_port, redis_port, sha, jwt=True), [redis_port],
                        dict(script=token_script(alg, 1))))
    for alg in ALGORITHMS:
        targets.append((f"fairgate, Redis, one {alg} token",
                        lambda p: fairgate_auth(p, up_port, redis), [redis_port],
                        dict(script=token_script(alg, 1))))
    for alg in ALGORITHMS:
        targets.append((f"fairgate, Redis, {ROTATING:,} {alg} tokens",
                        lambda p: fairgate_auth(p, up_port, redis), [redis_port],
                        dict(script=token_script(alg, ROTATING))))
    auth_port = free_port()
    auth_service(auth_port)
    wait_port(auth_port)
    session = dict(headers=["Cookie: _oauth2_proxy=session-1"])
    targets += [
        ("fairgate, Redis, external auth, no cache",
         lambda p: fairgate_external(p, up_port, redis, auth_port, False), [redis_port], session),
        ("fairgate, Redis, external auth, cached",
         lambda p: fairgate_external(p, up_port, redis, auth_port, True), [redis_port], session),
    ]
    if CANDIDATE:
        variant = dict(binary=CANDIDATE, env=CANDIDATE_ENV)
        targets += [
            ("candidate, no limits", lambda p: fairgate(p, up_port, memory, limits=False, **variant), []),
            ("candidate, memory store", lambda p: fairgate(p, up_port, memory, **variant), []),
            ("candidate, Redis", lambda p: fairgate(p, up_port, redis, **variant), [redis_port]),
            ("candidate, Redis Cluster", lambda p: fairgate(p, up_port, cluster, **variant),
             cluster_ports),
            ("candidate, Redis, one HS256 token", lambda p: fairgate_auth(p, up_port, redis, **variant),
             [redis_port], dict(script=token_script("HS256", 1))),
            ("candidate, Redis, one RS256 token", lambda p: fairgate_auth(p, up_port, redis, **variant),
             [redis_port], dict(script=token_script("RS256", 1))),
        ]
    targets = [t if len(t) == 4 else (*t, {}) for t in targets]
    if ONLY:
        targets = [t for t in targets
                   if t[0] in (BASELINE, LUA_BASELINE) or any(o in t[0] for o in ONLY)]
    running = {}
    for name, launch, _, load in targets:
        port = up_port if name == "upstream direct" else free_port()
        proc = launch(port)
        wait_port(port)
        running[name] = (port, proc)
        wrk(port, 1, name=name, **load)  # warm up: connections, caches, script load

    results = {name: [] for name, _, _, _ in targets}
    for rnd in range(ROUNDS):
        for name, _, store_ports, load in targets:
            port, proc = running[name]
            pids = tree(proc.pid) if proc else []
            redis_pids = [int(redis_cli(p, "INFO", "server").split("process_id:")[1].split()[0])
                          for p in store_ports]
            calls_before = sum(script_calls(p) for p in store_ports)
            cpu0, ucpu0, rcpu0 = cpu_seconds(pids), cpu_seconds(pids, True), cpu_seconds(redis_pids)
            requests, rps, p50, p99 = wrk(port, SECONDS, name=name, **load)
            cpu = cpu_seconds(pids) - cpu0
            ucpu = cpu_seconds(pids, True) - ucpu0
            rcpu = cpu_seconds(redis_pids) - rcpu0
            calls = sum(script_calls(p) for p in store_ports) - calls_before
            results[name].append({
                "rps": rps, "p50": p50, "p99": p99,
                "cpu_us": cpu * 1e6 / requests if proc else None,
                "user_us": ucpu * 1e6 / requests if proc else None,
                "redis_us": rcpu * 1e6 / requests if store_ports else None,
                "calls": calls / requests if store_ports else None,
            })
            print(f"round {rnd + 1}/{ROUNDS} {name:28} {rps:9.0f} req/s  p99 {p99:6.2f} ms"
                  + (f"  {cpu * 1e6 / requests:6.1f} us/req" if proc else ""), flush=True)

    if ONLY or CANDIDATE:
        base = median(results[BASELINE], "cpu_us")
        for name, _, _, _ in targets:
            rps, p99, cpu, user, rcpu = (median(results[name], k)
                                         for k in ("rps", "p99", "cpu_us", "user_us", "redis_us"))
            print(f"{name:28} {rps:9.0f} req/s  p99 {p99:5.2f} ms"
                  + (f"  {cpu:5.1f} us/req ({cpu / base:.2f}x, user {user:4.1f})" if cpu else "")
                  + (f"  Redis {rcpu:4.1f} us/req" if rcpu else ""))
        return
    rss = memory_store_tenants(up_port)
    rss["cluster"] = cluster_builds()
    report(targets, results, rss)


def cluster_builds():
    """The controller's full policy build at 1,000, 3,000 and 10,000 Ingresses
    (`examples/cluster_build.rs`; 1,000 and 1,500 in a shortened run, whose
    debug build is slow): one JSON line each."""
    out = []
    for ingresses in ((1000, 3000, 10000) if SECONDS >= 5 else (1000, 1500)):
        run = subprocess.run([str(CLUSTER_BUILD), str(ingresses), "5", "5"], capture_output=True,
                             text=True, check=True)
        out.append(json.loads(run.stdout))
    return out


def cluster_rows(runs):
    first = runs[0]["median_ms"]
    return "\n".join(f"| controller, {r['ingresses']:,} Ingresses | {r['endpoints']:,} | {r['routes']:,} "
                     f"| {r['median_ms']:.0f} ms | {r['max_ms']:.0f} ms | {r['median_ms'] / first:.1f}x "
                     f"| {r['steady_mib']:.0f} MiB | {r['peak_mib']:.0f} MiB |" for r in runs)


def script_calls(port):
    stats = redis_cli(port, "INFO", "commandstats")
    total = 0
    for cmd in ("evalsha", "eval"):
        m = re.search(rf"cmdstat_{cmd}:calls=(\d+)", stats)
        total += int(m.group(1)) if m else 0
    return total


def memory_store_tenants(up_port, tenants=100_000 if SECONDS >= 5 else 10_000):
    """Resident memory of a memory-store gateway holding `tenants` active
    buckets (10,000 in a shortened run, which a debug build cannot touch
    100,000 of in a minute)."""
    port = free_port()
    proc = fairgate(port, up_port, MEMORY_STORE, capacity=1000, rate="1/h")
    wait_port(port)
    # Enough requests to touch every tenant at least once: each run goes on
    # from where the last stopped, and the runs are bounded (a slow machine
    # gets an error, not a loop).
    total, runs = 0, 12
    for run in range(runs):
        script = write(f"tenants-{run}.lua", f"""
counter = {total}
request = function()
  counter = counter + 1
  wrk.headers["X-Tenant"] = "tenant-" .. (counter % {tenants})
  return wrk.format(nil)
end
""")
        requests, *_ = wrk(port, 5, script)
        total += requests
        if total >= tenants * 1.2:
            break
    else:
        stop(proc)
        raise SystemExit(f"active tenants: {total:,} requests in {runs} runs of 5 s, "
                         f"fewer than the {int(tenants * 1.2):,} that touch every tenant")
    status = Path(f"/proc/{proc.pid}/status").read_text()
    kib = lambda f: int(re.search(rf"{f}:\s+(\d+)", status).group(1))
    stop(proc)
    return {"tenants": tenants, "rss_mib": kib("VmRSS") / 1024, "hwm_mib": kib("VmHWM") / 1024}


def median(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def report(targets, results, rss):
    base = {k: median(results[BASELINE], k) for k in ("rps", "p99", "cpu_us")}
    rows = []
    lua = {k: median(results[LUA_BASELINE], k) for k in ("rps", "p99", "cpu_us", "redis_us")}
    lua_total = lua["cpu_us"] + (lua["redis_us"] or 0)
    for name, _, _, _ in targets:
        r = {k: median(results[name], k)
             for k in ("rps", "p50", "p99", "cpu_us", "user_us", "redis_us", "calls")}
        r["name"] = name
        rows.append(r)

    def ratio(v, b):
        return f"{v / b:.2f}x" if v is not None and b else "–"

    def num(v, fmt):
        return fmt.format(v) if v is not None else "–"

    lines = [
        "| target | req/s | p50 ms | p99 ms | server CPU µs/req | of which user space | req/s vs base | p99 vs base | CPU vs base | Redis CPU µs/req | script calls/req | req/s vs Lua | p99 vs Lua | CPU+Redis vs Lua |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        total = (r["cpu_us"] or 0) + (r["redis_us"] or 0) if r["cpu_us"] is not None else None
        lines.append(
            f"| {r['name']} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {num(r['cpu_us'], '{:.1f}')} "
            f"| {num(r['user_us'], '{:.1f}')} "
            f"| {ratio(r['rps'], base['rps'])} | {ratio(r['p99'], base['p99'])} | {ratio(r['cpu_us'], base['cpu_us'])} "
            f"| {num(r['redis_us'], '{:.1f}')} | {num(r['calls'], '{:.3f}')} "
            f"| {ratio(r['rps'], lua['rps'])} | {ratio(r['p99'], lua['p99'])} | {ratio(total, lua_total)} |")
    chart(rows)
    machine = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s+(.*)", machine)
    def first_line(cmd):
        out = subprocess.run(cmd, capture_output=True, text=True)
        return ((out.stdout or "") + (out.stderr or "")).strip().splitlines()[0]

    versions = "; ".join(first_line(c) for c in (["nginx", "-v"], ["wrk", "-v"], ["haproxy", "-v"],
                                                 ["redis-server", "--version"]))
    notes = (ROOT / "bench" / "notes.md").read_text() if (ROOT / "bench" / "notes.md").exists() else ""
    text = f"""# Benchmarks

Generated by `bench/run` (ROUNDS={ROUNDS}, SECONDS_PER={SECONDS}{PROFILE_NOTE}) on {time.strftime('%Y-%m-%d')}.
Do not edit the generated part by hand; notes come from `bench/notes.md`.

**Machine:** {model.group(1).strip() if model else 'unknown CPU'}, {os.cpu_count()} CPUs, Linux {os.uname().release}.
**Versions:** {versions}; fairgate {subprocess.run([str(FAIRGATE), '--version'], capture_output=True, text=True).stdout.strip()} (release build).

**Method:** every target fronts the same nginx upstream (`return 200`), runs one
worker thread pinned to CPU 1 with access logs off, and is loaded by
`taskset -c 0 wrk -t1 -c{CONNECTIONS} -d{SECONDS}s --latency -H 'X-Tenant: tenant-1'`
(upstream, wrk and Redis share CPU 0). Targets alternate within each of {ROUNDS} rounds;
the table shows medians. CPU µs/req is the server's utime+stime from /proc divided by
requests served ("of which user space": utime alone; the rest is kernel time, mostly
TCP); for Redis targets the Redis CPU is shown separately. Limits never refuse
(capacities far above the load), so every target does the full work on every request:
nginx `limit_req` keyed by `$http_x_tenant`, HAProxy `track-sc0 hdr(x-tenant)` with an
`http_req_rate` stick table, fairgate a `{{header: X-Tenant}}`-scoped token bucket
(no JWT, since the others do none). "bare Pingora proxy" is `examples/bare_pingora.rs`:
the smallest Pingora proxy, with fairgate's build and runtime settings and nothing else.
Baseline ("base") is **{BASELINE}**, for limits kept per process.

The fleet-wide baseline ("Lua") is **{LUA_BASELINE}**: nginx with Debian's
`libnginx-mod-http-lua`, whose `access_by_lua` does one `EVALSHA` of fairgate's own
`lua/token_bucket.lua` per request over a cosocket keepalive pool (same key shape) and sets
the two IETF quota headers, as Kong's redis policy and APISIX's limit-count do; it sends no
token. Its rows "one HS256 (RS256) token verified per request" first check a bearer JWT on
every request, as Kong's and APISIX's jwt plugins do: `bench/jwt.lua` decodes it with cjson,
checks `alg` and `exp` and verifies the signature through OpenSSL's libcrypto from LuaJIT's
FFI (no cache), then spends the bucket of the token's tenant. "CPU+Redis vs Lua" compares gateway plus Redis CPU per request. The token rows verify
a bearer JWT on every request (HS256 with a secret; RS256 with a 2048-bit key; ES256; EdDSA)
and spend a tenant-scoped bucket in Redis: "one token" reuses a single token, as one client
does; "{ROTATING:,} tokens" sends {ROTATING:,} distinct tokens in turn, as many clients do.
The external auth rows authenticate by `auth: external` (forward auth, as ingress-nginx's
`auth-url` to oauth2-proxy): a subrequest per request to an auth service (nginx answering 202
with `X-Auth-Request-User`/`-Groups`, on CPU 0, its CPU not counted) whose answer names the
tenant whose Redis bucket is spent; "cached" keeps the answer by the session cookie (60 s), so
one session costs one subrequest.

{chr(10).join(lines)}

![CPU per request and p99 by target](benchmarks.png)

**Memory store, {rss['tenants']:,} active tenants** (one bucket each, none full):
gateway resident memory {rss['rss_mib']:.1f} MiB (peak {rss['hwm_mib']:.1f} MiB).

**Controller mode, one policy build** (`examples/cluster_build.rs`: Ingresses of two
paths each in 50 namespaces, one in ten with a `limit-rps` annotation, one in twenty with
a TLS section and its Secret, a Service and an EndpointSlice of 5 ready endpoints behind
each; translation, merge into the base file, reading, loading and the pools, as the
controller builds on start-up and on an Ingress change; median of 5 builds, one process;
steady: resident with the last policy held; targets at 10,000: build 1 s, steady 300 MiB,
peak 400 MiB, 12x the 1,000 build):

| rows | endpoints | routes | build, median | slowest | x the first row | steady RSS | peak RSS |
|---|---|---|---|---|---|---|---|
{cluster_rows(rss['cluster'])}

{notes}"""
    (ROOT / "docs" / "benchmarks.md").write_text(text)
    print(f"wrote docs/benchmarks.md and docs/benchmarks.png ({WORK})")


def chart(rows):
    data = write("chart.dat", "\n".join(
        f'"{r["name"]}" {r["cpu_us"] if r["cpu_us"] is not None else 0:.2f} {r["p99"]:.3f}' for r in rows))
    script = write("chart.gp", f"""
set terminal pngcairo size 1100,520 font ",10" noenhanced
set output "{ROOT}/docs/benchmarks.png"
set multiplot layout 1,2 title "fairgate vs nginx and HAProxy (one worker thread each)"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set xtics rotate by -35 left
set grid ytics
unset key
set title "server CPU per request (µs)"
plot "{data}" using 2:xtic(1) lc rgb "#4477aa"
set title "p99 latency (ms)"
plot "{data}" using 3:xtic(1) lc rgb "#cc6677"
unset multiplot
""")
    subprocess.run(["gnuplot", str(script)], check=True)


def run(entry):
    """Runs `entry`, then stops every process started and removes WORK."""
    try:
        entry()
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    run(main)
