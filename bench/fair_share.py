#!/usr/bin/env python3
"""Fair share under overload (SPEC §12): a saturated upstream shared among
tenants. Run by bench/run after edge.py; appends its section to
docs/benchmarks.md.

The upstream has a fixed capacity: 16 requests in service at once, 20 ms
each, the rest queued inside it in arrival order (a Python asyncio server,
`upstream` below). Four quiet tenants send 25 req/s each, open loop (a
request is sent at its intended time whatever came before, and its latency
counts from that time); one noisy tenant keeps 200 keep-alive connections
busy. Tenants are told apart by `X-Tenant` (fairgate `by: {header:
X-Tenant}`), except in the weights row, where tokens carry the plan.

Rows, the targets interleaved round after round:
- the quiet tenants alone (their unloaded p99), through fairgate with
  `fair_share {max_in_flight: 16}`;
- the quiet tenants beside the noisy one through fairgate with that
  `fair_share`, fairgate without it, and HAProxy with `maxconn 16` on its
  server (its FIFO queue): quiet p50, p99, failures, the noisy tenant's
  req/s against the capacity the quiet ones leave, the most requests the
  upstream held at once;
- two noisy tenants on plans weighted 4:1: the ratio of their req/s;
- `max_in_flight: adaptive` (min 8, max 64): when the limit settles, where,
  and the quiet p99;
- 10,000 distinct tenants against 10 through the saturated pool: the
  gateway's CPU per request.
"""
import asyncio
import base64
import hashlib
import hmac
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CAPACITY, SERVICE = 16, 0.020
QUIET, QUIET_RPS, NOISY = 4, 25, 200
SECRET = "fair-share-bench-secret-of-32-bytes!"
SECTION = "## Fair share under overload"


# ---- the upstream (its own process) ---------------------------------------

def serve_upstream(port):
    """16 in service at once, 20 ms each, FIFO beyond; /__stats answers at once."""
    held = {"now": 0, "max": 0}
    gate = asyncio.Semaphore(CAPACITY)

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path.startswith(b"/__stats"):
                    body = json.dumps(held).encode()
                    if b"reset" in path:
                        held["max"] = held["now"]
                else:
                    held["now"] += 1
                    held["max"] = max(held["max"], held["now"])
                    async with gate:
                        await asyncio.sleep(SERVICE)
                    held["now"] -= 1
                    body = b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the load (its own process) -------------------------------------------

async def exchange(conn, head):
    reader, writer = conn
    writer.write(head)
    answer = await reader.readuntil(b"\r\n\r\n")
    status = int(answer.split(b" ", 2)[1])
    length = 0
    for line in answer.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


def request(tenant, token=None):
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET /x HTTP/1.1\r\nHost: bench\r\nX-Tenant: {tenant}\r\n{auth}\r\n".encode()


async def noisy_client(port, heads, until, served, warm):
    """Keeps one connection busy until `until`: with one (tenant, head), as
    that tenant; with more, a tenant drawn at random for each request."""
    conn = await asyncio.open_connection("127.0.0.1", port)
    while time.monotonic() < until:
        tenant, head = random.choice(heads)
        try:
            status = await exchange(conn, head)
        except (asyncio.IncompleteReadError, ConnectionError):
            conn = await asyncio.open_connection("127.0.0.1", port)
            continue
        if time.monotonic() >= warm:
            served.setdefault(tenant, {}).setdefault(status, 0)
            served[tenant][status] += 1


async def quiet_tenant(port, tenant, start, until, out):
    """Open loop: request k is due at start + k/25 s, sent then on an idle
    connection (or a new one), its latency counted from then."""
    idle, head, tasks = [], request(tenant), []

    async def one(due):
        conn = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
        try:
            status = await asyncio.wait_for(exchange(conn, head), 30)
            idle.append(conn)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            status = 0
        out.append((time.monotonic() - due, status))

    k = 0
    while True:
        due = start + k / QUIET_RPS
        if due >= until:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(one(due)))
        k += 1
    await asyncio.gather(*tasks)


async def load(spec):
    port, seconds = spec["port"], spec["seconds"]
    now = time.monotonic()
    warm, until = now + spec.get("warmup", 1.0), now + spec.get("warmup", 1.0) + seconds
    heads = [(t, request(t, spec.get("tokens", {}).get(t))) for t in spec["noisy"]]
    served, quiet = {}, []
    # Each noisy tenant of a few has connections of its own (a closed loop
    # per tenant); many tenants share every connection, drawn per request.
    per = (lambda i: heads) if len(heads) > 2 else (lambda i: [heads[i % len(heads)]])
    clients = [noisy_client(port, per(i), until, served, warm) for i in range(spec["connections"])
               if heads]
    tenants = [quiet_tenant(port, f"quiet-{i}", warm, until, quiet) for i in range(spec["quiet"])]
    await asyncio.gather(*clients, *tenants)
    lat = sorted(l for l, _ in quiet)
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else 0.0
    return {"quiet_p50": pick(0.50), "quiet_p99": pick(0.99), "quiet_sent": len(quiet),
            "quiet_failed": sum(1 for _, s in quiet if s != 200),
            "noisy_rps": {t: s.get(200, 0) / seconds for t, s in served.items()},
            "noisy_refused": {t: sum(n for c, n in s.items() if c != 200) for t, s in served.items()}}


# ---- the benchmark (bench/run) --------------------------------------------

def token(tenant, plan):
    enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=")
    head = enc(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = enc(json.dumps({"tid": tenant, "sub": "u", "plan": plan,
                           "exp": int(time.time()) + 3600}).encode())
    sig = enc(hmac.new(SECRET.encode(), head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


def fairgate(bench, port, up, fair_share=None, by_token=False):
    home = Path(tempfile.mkdtemp(prefix=f"fs-{port}-", dir=bench.WORK))
    admin = bench.free_port()
    by = "tenant" if by_token else "{header: X-Tenant}"
    fair = (f"fair_share: {{max_in_flight: {fair_share}, by: {by}, "
            f"queue: {{per_tenant: 1000, timeout: 30s}}, weights: {{gold: 4}}"
            + (", adaptive: {min: 8, max: 64}" if fair_share == "adaptive" else "") + "}"
            if fair_share else "")
    auth = ("auth: {keys: [{alg: HS256, secret_env: FAIRGATE_JWT_SECRET}]}" if by_token else "")
    conf = home / "fairgate.yaml"
    conf.write_text(f"""
server:
  listen: ["127.0.0.1:{port}"]
  threads: 1
  shutdown_grace: 1s
  keepalive_timeout: 300s
admin: {{listen: "127.0.0.1:{admin}"}}
store: {{kind: memory}}
acknowledge: [store.process_local]
default_limits: none
{auth}
upstreams:
  api: {{targets: ["127.0.0.1:{up}"], read_timeout: 60s, {fair}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: {"required" if by_token else "none"}}}
""")
    p = bench.start([str(bench.FAIRGATE), "serve", "-c", str(conf)], 1,
                    env={"RUST_LOG": "warn", "FAIRGATE_JWT_SECRET": SECRET}, name=f"fs-{port}")
    p.admin = admin
    return p


def haproxy(bench, port, up):
    conf = bench.write(f"fs-haproxy-{port}.cfg", f"""
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout queue 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-reuse always
  server up 127.0.0.1:{up} maxconn {CAPACITY}
""")
    return bench.start(["haproxy", "-f", str(conf)], 1, name=f"fs-haproxy-{port}")


def run_load(bench, spec):
    out = subprocess.run(["taskset", "-c", "0", sys.executable, __file__, "load"],
                         input=json.dumps(spec), check=True, capture_output=True, text=True,
                         timeout=600)
    return json.loads(out.stdout)


def upstream_max(up, reset=False):
    with urllib.request.urlopen(f"http://127.0.0.1:{up}/__stats{'?reset' if reset else ''}") as r:
        return json.load(r)["max"]


def limit_of(p):
    """The adaptive limit in force (the metric), or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.admin}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('fairgate_fair_share_limit{upstream="api"}'):
                    return int(float(line.split()[-1]))
    except OSError:
        return None
    return None


def started(bench, make):
    port = bench.free_port()
    p = make(port)
    bench.wait_port(port)
    return port, p


def loaded(bench, up, seconds, rounds):
    """Quiet alone (fairgate, fair share), then quiet beside noisy through
    each target, interleaved."""
    targets = {
        "fairgate, fair_share 16": lambda port: fairgate(bench, port, up, 16),
        "fairgate, no fair_share": lambda port: fairgate(bench, port, up),
        "HAProxy, maxconn 16 (FIFO)": lambda port: haproxy(bench, port, up),
    }
    runs = {}
    for _ in range(rounds):
        port, p = started(bench, targets["fairgate, fair_share 16"])
        runs.setdefault("unloaded", []).append(
            run_load(bench, {"port": port, "seconds": seconds, "quiet": QUIET, "noisy": [],
                             "connections": 0}))
        bench.stop(p)
        for name, make in targets.items():
            port, p = started(bench, make)
            upstream_max(up, reset=True)
            r = run_load(bench, {"port": port, "seconds": seconds, "quiet": QUIET,
                                 "noisy": ["noisy"], "connections": NOISY})
            r["upstream_max"] = upstream_max(up)
            runs.setdefault(name, []).append(r)
            bench.stop(p)
    return runs


def weighted(bench, up, seconds):
    port, p = started(bench, lambda port: fairgate(bench, port, up, 16, by_token=True))
    tokens = {"gold": token("gold", "gold"), "free": token("free", "free")}
    r = run_load(bench, {"port": port, "seconds": seconds, "quiet": 0, "noisy": list(tokens),
                         "tokens": tokens, "connections": NOISY})
    bench.stop(p)
    return r


def adaptive(bench, up, seconds):
    port, p = started(bench, lambda port: fairgate(bench, port, up, "adaptive"))
    spec = {"port": port, "seconds": seconds, "quiet": QUIET, "noisy": ["noisy"],
            "connections": NOISY, "warmup": 0.0}
    load_proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, __file__, "load"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    load_proc.stdin.write(json.dumps(spec))
    load_proc.stdin.close()
    limits, t0 = [], time.monotonic()
    while load_proc.poll() is None:
        limits.append((time.monotonic() - t0, limit_of(p)))
        time.sleep(0.5)
    r = json.loads(load_proc.stdout.read())
    bench.stop(p)
    r["limits"] = [(round(t, 1), l) for t, l in limits if l is not None]
    r["seconds"] = seconds
    return r


def many_tenants(bench, up, seconds):
    """Gateway CPU per request with 10 and with 10,000 tenants, saturated."""
    out = {}
    for n in (10, 10_000):
        port, p = started(bench, lambda port: fairgate(bench, port, up, 16))
        pids = bench.tree(p.pid)
        before = bench.cpu_seconds(pids)
        r = run_load(bench, {"port": port, "seconds": seconds, "quiet": 0, "warmup": 0.0,
                             "noisy": [f"tenant-{i}" for i in range(n)], "connections": NOISY})
        cpu = bench.cpu_seconds(pids) - before
        served = sum(r["noisy_rps"].values()) * seconds
        out[n] = {"cpu_us": cpu / max(served, 1) * 1e6, "rps": served / seconds}
        bench.stop(p)
    return out


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def section(runs, weights, adapt, tenants, seconds, rounds, note):
    base = med(runs["unloaded"], "quiet_p99")
    leave = CAPACITY / SERVICE - QUIET * QUIET_RPS
    lines = [SECTION, "",
             f"An upstream of fixed capacity ({CAPACITY} requests in service at once, "
             f"{SERVICE * 1000:.0f} ms each, queued inside beyond), {QUIET} quiet tenants at "
             f"{QUIET_RPS} req/s each (open loop, latency from the intended send time) and one "
             f"noisy tenant on {NOISY} keep-alive connections; {rounds} interleaved rounds of "
             f"{seconds} s, medians (bench/fair_share.py{note}). The quiet tenants alone, "
             f"through fairgate with `fair_share`: p99 **{base:.1f} ms**.", "",
             "| target | quiet p50 | quiet p99 | p99 ÷ unloaded | quiet failed | noisy req/s "
             "(share of what quiet leave) | upstream held at most |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, rs in runs.items():
        if name == "unloaded":
            continue
        noisy = statistics.median(sum(r["noisy_rps"].values()) for r in rs)
        lines.append(f"| {name} | {med(rs, 'quiet_p50'):.1f} ms | {med(rs, 'quiet_p99'):.1f} ms "
                     f"| {med(rs, 'quiet_p99') / base:.2f}× | "
                     f"{sum(r['quiet_failed'] for r in rs)} of {sum(r['quiet_sent'] for r in rs)} | "
                     f"{noisy:,.0f} ({noisy / leave:.0%}) | {max(r['upstream_max'] for r in rs)} |")
    fair = med(runs["fairgate, fair_share 16"], "quiet_p99")
    for peer in ("fairgate, no fair_share", "HAProxy, maxconn 16 (FIFO)"):
        lines.append(f"\nQuiet p99, {peer} ÷ fairgate with `fair_share`: "
                     f"**{med(runs[peer], 'quiet_p99') / fair:.1f}×**.")
    gold, free = weights["noisy_rps"].get("gold", 0), weights["noisy_rps"].get("free", 0)
    lines.append(f"\nWeights by plan 4:1 (`weights: {{gold: 4}}`, tokens naming the plan), two "
                 f"noisy tenants of {NOISY // 2} connections each: gold {gold:,.0f} req/s, free "
                 f"{free:,.0f} req/s: **{gold / max(free, 1e-9):.1f}×** apart.")
    limits = adapt["limits"]
    tail = sorted(l for _, l in limits[-max(1, len(limits) // 3):]) or [0]
    middle = tail[len(tail) // 2]
    near = lambda x: 0.75 * middle <= x <= 1.25 * middle
    settled = next((t for i, (t, _) in enumerate(limits) if all(near(x) for _, x in limits[i:])),
                   None)
    inside = next((t for i, (t, _) in enumerate(limits)
                   if all(8 <= x <= 48 for _, x in limits[i:])), None)
    lines.append(f"\n`max_in_flight: adaptive` (min 8, max 64), same load for {adapt['seconds']} s: "
                 f"the limit is within [8, 48] from **{inside if inside is not None else 'never'} s** "
                 f"on, and within 25% of its final median ({middle}) from "
                 f"{settled if settled is not None else 'never'} s on "
                 f"(sampled every 0.5 s: {[x for _, x in limits]}); quiet p99 "
                 f"{adapt['quiet_p99']:.1f} ms (**{adapt['quiet_p99'] / base:.2f}×** unloaded), "
                 f"{adapt['quiet_failed']} of {adapt['quiet_sent']} failed.")
    few, many = tenants[10], tenants[10_000]
    lines.append(f"\n10,000 tenants against 10 through the saturated pool: "
                 f"{many['cpu_us']:.1f} against {few['cpu_us']:.1f} µs of gateway CPU a request "
                 f"(**{many['cpu_us'] / few['cpu_us']:.2f}×**), at {many['rps']:,.0f} and "
                 f"{few['rps']:,.0f} req/s.")
    return "\n".join(lines) + "\n"


def main():
    sys.path.insert(0, str(Path(__file__).parent))
    import bench
    seconds = max(2, 2 * bench.SECONDS)
    up = bench.free_port()
    upstream_proc = bench.start([sys.executable, __file__, "upstream", str(up)], 0,
                                name="fs-upstream")
    bench.wait_port(up)
    try:
        runs = loaded(bench, up, seconds, bench.ROUNDS)
        weights = weighted(bench, up, seconds)
        adapt = adaptive(bench, up, max(seconds, 20 if bench.SECONDS >= 5 else 4))
        tenants = many_tenants(bench, up, seconds)
    finally:
        for p in bench.procs:
            bench.stop(p)
        bench.stop(upstream_proc)
    text = section(runs, weights, adapt, tenants, seconds, bench.ROUNDS, bench.PROFILE_NOTE)
    print(text)
    if os.environ.get("EDGE_NO_DOCS"):
        return
    doc = bench.ROOT / "docs" / "benchmarks.md"
    old = doc.read_text().split(SECTION)[0].rstrip() + "\n\n"
    doc.write_text(old + text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["upstream"]:
        serve_upstream(int(sys.argv[2]))
    elif sys.argv[1:2] == ["load"]:
        print(json.dumps(asyncio.run(load(json.load(sys.stdin)))))
    else:
        main()
