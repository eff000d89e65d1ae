#!/usr/bin/env python3
"""Where the CPU goes: nginx proxy, nginx + Lua + Redis, bare Pingora and
fairgate (no limits, Redis, Redis with an HS256 token) under the bench's load, each profiled with `perf record -e cpu-clock`
and its samples grouped by where they fall: kernel symbols by subsystem,
user symbols by crate. Prints a Markdown table of the shares. Needs what
bench/run installs, plus `perf` (linux-perf); run it after bench/run has
built the binaries:

    python3 bench/profile.py
"""
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


def profile(name, port, pid, script=None):
    data = WORK / f"{port}.perf"
    extra = ["-s", str(script)] if script else []
    load = subprocess.Popen(["taskset", "-c", "0", "wrk", "-t1", "-c32", f"-d{SECONDS + 2}s",
                             "-H", "X-Tenant: tenant-1", *extra, f"http://127.0.0.1:{port}/"],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1000", "-o", str(data),
                    "-p", ",".join(map(str, pids)), "--", "sleep", str(SECONDS)],
                   capture_output=True, check=True)
    cpu = cpu_seconds(pids) - cpu0
    out = load.communicate()[0]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    us_per_req = cpu * 1e6 / (rps * SECONDS)
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym",
                             "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    shares = dict.fromkeys(GROUPS, 0.0)
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if m:
            shares[group(m.group(2), m.group(3), m.group(4).strip())] += float(m.group(1))
    return name, us_per_req, shares


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
    targets = [
        ("nginx proxy", lambda p: bench.nginx_proxy(p, up, False), None),
        ("nginx + Lua + Redis", lambda p: bench.openresty(p, up, redis_port, sha), None),
        ("bare Pingora", lambda p: bench.bare_pingora(p, up), None),
        ("fairgate, no limits",
         lambda p: bench.fairgate(p, up, bench.MEMORY_STORE, limits=False), None),
        ("fairgate, Redis", lambda p: bench.fairgate(p, up, redis), None),
        ("fairgate, Redis, HS256 token", lambda p: bench.fairgate_auth(p, up, redis), hs256),
    ]
    rows = []
    for name, launch, script in targets:
        port = free_port()
        proc = launch(port)
        wait_port(port)
        wrk(port, 1, script=script)
        rows.append(profile(name, port, proc.pid, script))
        stop(proc)
    # Sampling adds to every target's CPU, so only the shares are printed;
    # multiply them by bench/run's CPU µs/req for microseconds.
    print("| share of samples | " + " | ".join(n for n, _, _ in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for g in GROUPS:
        print(f"| {g} | " + " | ".join(f"{s[g]:.1f}%" for _, _, s in rows) + " |")
    print("\nCPU µs/req while profiled: "
          + ", ".join(f"{n} {us:.1f}" for n, us, _ in rows))


if __name__ == "__main__":
    bench.run(main)
