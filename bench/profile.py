#!/usr/bin/env python3
"""Where the CPU goes: nginx proxy, nginx + Lua + Redis, bare Pingora and
fairgate (no limits, Redis, Redis with an HS256 token) under the bench's load, each profiled with `perf record -e cpu-clock`
and its samples grouped by where they fall: kernel symbols by subsystem,
user symbols by crate. Prints a Markdown table of the shares. Needs what
bench/run installs, plus `perf` (linux-perf); run it after bench/run has
built the binaries:

    python3 bench/profile.py
"""
import os
import re
import shutil
import subprocess
import time

import bench
from bench import WORK, wait_port, wrk, free_port, tree, cpu_seconds, stop

SECONDS = 5
GROUPS = [
    "kernel: TCP/IP and sockets",
    "kernel: scheduler and wake-ups",
    "kernel: other (syscall entry, epoll, timers)",
    "user: the proxy's own code",
    "user: Pingora",
    "user: tokio and mio",
    "user: http, bytes, httparse",
    "user: allocator, libc, vdso clock",
    "user: Redis client (redis-rs, combine)",
    "user: other (std, hashing, prometheus, tracing)",
]


def group(dso, kind, sym):
    if kind == "k":
        if re.search(r"tcp|sock|skb|ip_|inet|net|napi|loopback|dev_|xmit|bbr|sk_|csum|_iter|rcv", sym):
            return GROUPS[0]
        if re.search(r"sched|switch|wake|raw_spin_unlock_irq|pick_|enqueue|dequeue|update_curr|ttwu", sym):
            return GROUPS[1]
        return GROUPS[2]
    if dso == "nginx" or "luajit" in dso or "ngx_http_lua" in dso or "fairgate::" in sym:
        return GROUPS[3]
    if re.match(r"_?mi_|__mem|malloc|free", sym) or dso.startswith("libc") or dso == "[vdso]":
        return GROUPS[7]
    if "pingora" in sym:
        return GROUPS[4]
    if "tokio" in sym or "mio::" in sym:
        return GROUPS[5]
    if re.search(r"\bhttp::|bytes::|httparse", sym):
        return GROUPS[6]
    if re.search(r"\bredis::|combine::", sym):
        return GROUPS[8]
    return GROUPS[9]


# fairgate's own work, by component. fairgate runs inside Pingora through
# hooks (the ProxyHttp methods of `Gateway`, and the edge's stream guard
# around every socket), so a sample is fairgate's when its stack passes
# through one: the outermost hook names the component. Within the request
# filter (route, authentication, limits), the innermost frame of a library
# or module splits it further. Samples in no hook are the work bare Pingora
# does too: its HTTP/1 loop, tokio, the allocator and the kernel.
HOOK = r"^<fairgate::proxy::gateway::Gateway as pingora_proxy::proxy_trait::ProxyHttp>::"
HOOKS = [
    ("edge guard: reading the head (scanner, bounds) on the client socket",
     r"^(<fairgate::proxy::heads::Guarded as|fairgate::proxy::heads::Guarded::)"),
    ("request filter", HOOK + r"(request_filter|early_request_filter)"),
    ("upstream choice (upstream_peer)", HOOK + r"upstream_peer"),
    ("forwarded request headers (upstream_request_filter)", HOOK + r"upstream_request_filter"),
    ("response headers and quota (response_filter)", HOOK + r"(response_filter|upstream_response)"),
    ("metrics and access log (logging)", HOOK + r"logging"),
    ("other hooks", HOOK),
    # The Redis client's own task (redis-rs drives each connection from a
    # task of its own): its socket, parser and wake-ups, for fairgate.
    ("Redis client's connection task (redis-rs)", r"^<?(redis|combine)::"),
]
WITHIN_REQUEST = [
    ("request filter: Redis client (redis-rs) and its socket", r"^<?(redis|combine)::"),
    ("request filter: limiter (fairgate::limit)", r"^<?fairgate::limit::"),
    ("request filter: authentication and the token cache",
     r"^<?(fairgate::(auth|proxy::authn)|jsonwebtoken|aws_lc|moka)"),
    ("request filter: route match and target", r"^<?fairgate::(routing|host|proxy::target)"),
]
PINGORA = "not fairgate's: Pingora, tokio, allocator, kernel"
COMPONENTS = [n for n, _ in HOOKS[:1]] + [n for n, _ in WITHIN_REQUEST] + \
    ["request filter: the rest"] + [n for n, _ in HOOKS[2:]] + [PINGORA]


def stacks(data):
    """Folded stacks (root first, `;`-joined) with their sample counts."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym"],
                          capture_output=True, text=True).stdout
    folded, frames = {}, []
    for line in text.splitlines() + [""]:
        line = line.strip()
        if line:
            sym = line.split(None, 1)[1] if " " in line else "[unknown]"
            frames.append(re.sub(r"\+0x[0-9a-f]+$", "", sym))
        elif frames:
            key = ";".join(reversed(frames))
            folded[key] = folded.get(key, 0) + 1
            frames = []
    return folded


# The HTTP/1 keep-alive loop: under it, either Pingora's request (a child
# frame of pingora_proxy) or the wait for the next request's first bytes,
# inlined into it (`Heads::next_head`: the edge guard's read of the head).
HEADS = r"^<fairgate::proxy::heads::Heads<A> as pingora_core::apps::HttpServerApp>::process_new_http"


def next_head(frames):
    at = next((i for i, f in enumerate(frames) if re.match(HEADS, f)), None)
    return at is not None and at + 1 < len(frames) and \
        not frames[at + 1].startswith("<pingora_proxy::")


def by_component(folded):
    counts = dict.fromkeys(COMPONENTS, 0)
    for stack, n in folded.items():
        frames = stack.split(";")
        hook = next((h for f in frames for h, pat in HOOKS if re.match(pat, f)), None)
        if hook is None and next_head(frames):
            hook = HOOKS[0][0]
        if hook == "request filter":
            hook = next((c for f in reversed(frames) for c, pat in WITHIN_REQUEST
                         if re.match(pat, f)), "request filter: the rest")
        counts[hook or PINGORA] += n
    total = sum(counts.values()) or 1
    return {c: 100 * n / total for c, n in counts.items()}


def flame(folded, name, title):
    """An SVG flame graph in bench/flame/, drawn by inferno-flamegraph
    (`cargo install inferno`) or Brendan Gregg's flamegraph.pl
    (FLAMEGRAPH_DIR)."""
    out = bench.ROOT / "bench" / "flame" / f"{name}.svg"
    out.parent.mkdir(exist_ok=True)
    tool = shutil.which("inferno-flamegraph")
    cmd = [tool] if tool else ["perl", f"{os.environ.get('FLAMEGRAPH_DIR', '')}/flamegraph.pl"]
    text = "\n".join(f"{k} {v}" for k, v in folded.items()) + "\n"
    svg = subprocess.run(cmd + ["--title", title, "--minwidth", "0.5"], input=text,
                         capture_output=True, text=True, check=True).stdout
    out.write_text(svg)


def record(pids, data):
    """cpu-clock samples with DWARF call stacks (release builds keep no frame
    pointers) of `pids` for SECONDS."""
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "--call-graph",
                    "dwarf,16384", "-o", str(data), "-p", ",".join(map(str, pids)), "--",
                    "sleep", str(SECONDS)], capture_output=True, check=True)


def profile(name, port, pid, script=None, load=None):
    """Profiles `pid`'s tree under `load` (a command; wrk by default):
    CPU µs per request (or per connection), the shares by group and by
    fairgate component, and a flame graph."""
    data = WORK / f"{port}.perf"
    extra = ["-s", str(script)] if script else []
    cmd = load or ["taskset", "-c", "0", "wrk", "-t1", "-c32", f"-d{SECONDS + 2}s",
                   "-H", "X-Tenant: tenant-1", *extra, f"http://127.0.0.1:{port}/"]
    client = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    record(pids, data)
    cpu = cpu_seconds(pids) - cpu0
    out = client.communicate()[0]
    m = (re.search(r"Requests/sec:\s+([\d.]+)", out)
         or re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out))
    n = float(m.group(1)) * SECONDS if m else float(re.findall(
        r"(\d+) connections in ([\d.]+)s", out)[-1][0]) * SECONDS / (SECONDS + 2)
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym",
                             "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    shares = dict.fromkeys(GROUPS, 0.0)
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if m:
            shares[group(m.group(2), m.group(3), m.group(4).strip())] += float(m.group(1))
    folded = stacks(data)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    flame(folded, slug, f"{name}: {cpu * 1e6 / n:.1f} µs CPU each")
    return name, cpu * 1e6 / n, shares, by_component(folded)


def main():
    if not shutil.which("perf"):
        raise SystemExit("perf is missing: apt-get install linux-perf")
    up = free_port()
    bench.upstream(up)
    wait_port(up)
    redis_port = free_port()
    bench.redis_server(redis_port)
    lua = (bench.ROOT / "lua" / "token_bucket.lua").read_text()
    sha = bench.redis_cli(redis_port, "SCRIPT", "LOAD", lua).strip()
    redis = bench.redis_store(redis_port)
    hs256 = bench.token_script("HS256", 1)
    rs256 = bench.token_script("RS256", 1)
    targets = [
        ("nginx proxy", lambda p: bench.nginx_proxy(p, up, False), None),
        ("nginx + Lua + Redis", lambda p: bench.openresty(p, up, redis_port, sha), None),
        ("bare Pingora", lambda p: bench.bare_pingora(p, up), None),
        ("fairgate, no limits",
         lambda p: bench.fairgate(p, up, bench.MEMORY_STORE, limits=False), None),
        ("fairgate, Redis", lambda p: bench.fairgate(p, up, redis), None),
        ("fairgate, Redis, HS256 token", lambda p: bench.fairgate_auth(p, up, redis), hs256),
        ("fairgate, Redis, RS256 token", lambda p: bench.fairgate_auth(p, up, redis), rs256),
    ]
    rows = []
    for name, launch, script in targets:
        if bench.ONLY and not any(o in name for o in bench.ONLY):
            continue
        port = free_port()
        proc = launch(port)
        wait_port(port)
        wrk(port, 1, script=script)
        rows.append(profile(name, port, proc.pid, script))
        stop(proc)
    if not bench.ONLY:
        rows += tls_rows(up)
    # Sampling adds to every target's CPU, so the shares are what counts;
    # multiply them by bench/run's CPU µs/req for microseconds.
    table("share of samples", GROUPS, rows, 2)
    print()
    table("fairgate's own work, by component", COMPONENTS,
          [r for r in rows if r[0].startswith("fairgate")], 3)
    print("\nCPU µs each while profiled: " + ", ".join(f"{r[0]} {r[1]:.1f}" for r in rows))
    print("Flame graphs: bench/flame/*.svg")


def tls_rows(up):
    """fairgate and nginx under full and resumed TLS 1.3 handshakes (ECDSA
    P-256, openssl s_time -new and -reuse) and HTTP/2 over TLS (h2load -c8
    -m16)."""
    import edge
    certs = edge.certificates()
    rows = []
    for name, make in (("nginx", edge.nginx), ("fairgate", edge.fairgate)):
        port, proc = edge.started(make, up, certs["ecdsa"])
        s_time = ["taskset", "-c", "0", "openssl", "s_time", "-connect", f"127.0.0.1:{port}",
                  "-new", "-time", str(SECONDS + 2), "-www", "/"]
        rows.append(profile(f"{name}, full TLS handshakes", port, proc.pid, load=s_time))
        resumed = [*s_time[:-5], "-reuse", *s_time[-4:]]
        rows.append(profile(f"{name}, resumed TLS handshakes", port, proc.pid, load=resumed))
        h2load = ["taskset", "-c", "0", "h2load", "-c8", "-m16", "-D", str(SECONDS + 2),
                  f"https://127.0.0.1:{port}/"]
        rows.append(profile(f"{name}, HTTP/2 over TLS", port, proc.pid, load=h2load))
        stop(proc)
    return rows


def table(title, keys, rows, at):
    print(f"| {title} | " + " | ".join(r[0] for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r[at][k]:.1f}% ({r[at][k] * r[1] / 100:.1f} µs)"
                                         for r in rows) + " |")


if __name__ == "__main__":
    bench.run(main)
