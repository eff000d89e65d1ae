#!/usr/bin/env python3
"""The edge rows of the benchmark: what a real edge spends besides
plaintext keep-alive HTTP/1.1. Run by bench/run after bench.py, with the
same targets' placement (one worker thread pinned to CPU 1, the clients and
the upstream on CPU 0) and, for each measure, the targets interleaved round
after round:

- TLS 1.3 keep-alive requests (wrk over https, ECDSA P-256): req/s and
  server CPU per request;
- HTTP/2 over TLS, 8 connections of 16 concurrent streams (h2load);
- a new TLS 1.3 connection per request with a full handshake, ECDSA P-256
  and RSA-2048, and with the session resumed (`openssl s_time -new` and
  `-reuse`, one GET each): handshakes/s and server CPU per handshake;
- idle keep-alive connections, plain and TLS: resident memory per
  connection (each has made one request; the servers' RSS, all their
  processes, before and after, from /proc);
- a 1 GiB upload and a 1 GiB download (curl, `fairgate echo` upstream
  reading or writing it in 64 KiB chunks), fairgate through a route that
  holds a concurrency slot, nginx with `proxy_request_buffering off`:
  MB/s and server CPU per GiB;
- a compressed download: a quarter of that size of JSON text (a static
  nginx upstream on CPU 0), gzip level 1 (nginx `gzip on`, HAProxy
  `compression algo gzip`, fairgate `server.compression`): MB/s of the
  decoded body, server CPU per decoded GiB;
- TLS passthrough by SNI (HAProxy `mode tcp` on `req.ssl_sni`, fairgate
  `server.tls.passthrough`; this nginx has no stream module): a new
  connection per request, its full TLS 1.3 handshake (ECDSA P-256) with an
  nginx backend on CPU 0 through the target, one GET each, from a Python
  client naming the host (`openssl s_time` sends no SNI): connections/s and
  the target's CPU per connection.

Appends its section to docs/benchmarks.md (bench.py writes the rest).
"""
import getpass
import os
import re
import resource
import socket
import ssl
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import bench
from bench import (BARE_PINGORA, FAIRGATE, ROOT, ROUNDS, SECONDS, WORK, cpu_seconds, free_port,
                   start, stop, tree, upstream, wait_port, write)

# Every process here (clients and servers) may open this many files: the
# hard limit, which a sandbox may not let us raise.
FDS = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
if FDS == resource.RLIM_INFINITY:
    FDS = 1 << 20
# 10,000, or what HAProxy can hold under the limit (it reserves two files
# a connection): 9,700 under a hard limit of 20,000.
IDLE = int(os.environ.get("IDLE_CONNECTIONS",
                          min(10000, FDS // 2 - 300) if SECONDS >= 5 else 1000))
BODY = int(os.environ.get("BODY_BYTES", 1 << 30 if SECONDS >= 5 else 64 << 20))
SECTION = "## At the edge: TLS, handshakes, idle connections, big bodies"


def certificates():
    """Self-signed ECDSA P-256 and RSA-2048 certificates for bench.test."""
    out = {}
    for kind, args in (("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                       ("rsa", ["-newkey", "rsa:2048"])):
        crt, key = WORK / f"{kind}.crt", WORK / f"{kind}.key"
        subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2", *args,
                        "-keyout", str(key), "-out", str(crt), "-subj", "/CN=bench.test",
                        "-addext", "subjectAltName=DNS:bench.test"],
                       check=True, capture_output=True)
        pem = WORK / f"{kind}.pem"
        pem.write_text(crt.read_text() + key.read_text())
        out[kind] = (crt, key, pem)
    return out


def nginx(port, up, cert=None, gzip=False):
    tls = f"ssl http2; ssl_certificate {cert[0]}; ssl_certificate_key {cert[1]}" if cert else ""
    zip_ = ("gzip on; gzip_comp_level 1; gzip_min_length 256; gzip_proxied any; "
            "gzip_types application/json;") if gzip else ""
    conf = write(f"edge-nginx-{port}.conf", f"""
worker_processes 1;
worker_rlimit_nofile {FDS};
daemon off;
pid {WORK}/edge-nginx-{port}.pid;
error_log {WORK}/edge-nginx-{port}.err warn;
events {{ worker_connections {FDS}; }}
http {{
  access_log off;
  {zip_}
  keepalive_timeout 300s;
  client_max_body_size 0;
  proxy_request_buffering off;
  proxy_max_temp_file_size 0;
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port} {tls}; keepalive_requests 1000000;
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }} }}
}}""")
    return start(["nginx", "-c", str(conf)], 1, name=f"edge-nginx-{port}")


def haproxy(port, up, cert=None, gzip=False):
    tls = f"ssl crt {cert[2]} alpn h2,http/1.1" if cert else ""
    zip_ = "compression algo gzip\n  compression type application/json" if gzip else ""
    conf = write(f"edge-haproxy-{port}.cfg", f"""
global
  nbthread 1
  ulimit-n {FDS}
  maxconn {FDS // 2 - 100}
defaults
  mode http
  maxconn {FDS // 2 - 100}
  timeout connect 5s
  timeout client 300s
  timeout server 30s
  timeout http-keep-alive 300s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port} {tls}
  default_backend be
backend be
  http-reuse always
  {zip_}
  server up 127.0.0.1:{up}
""")
    return start(["haproxy", "-f", str(conf)], 1, name=f"edge-haproxy-{port}")


def fairgate(port, up, cert=None, slot=False, gzip=False):
    listen = f'tls: {{listen: "127.0.0.1:{port}", cert: "{cert[0]}", key: "{cert[1]}"}}' if cert else ""
    plain = f'"127.0.0.1:{free_port() if cert else port}"'
    # In a directory of its own: fairgate watches its config's directory,
    # and the logs written beside it would wake it.
    # (a port may come round again: each start gets a directory of its own)
    home = Path(tempfile.mkdtemp(prefix=f"fg-{port}-", dir=WORK)).name
    held = ", concurrency: transfers" if slot else ""
    conf = write(f"{home}/fairgate.yaml", f"""
server:
  listen: [{plain}]
  threads: 1
  shutdown_grace: 1s
  max_connections: {FDS}
  max_connections_per_ip: {FDS}
  keepalive_timeout: 300s
  {"compression: {algorithms: [gzip], gzip_level: 1}" if gzip else ""}
  {listen}
store: {{kind: memory}}
acknowledge: [store.process_local]
default_limits: none
upstreams:
  api: {{targets: ["127.0.0.1:{up}"]}}
concurrency:
  transfers: {{scope: {{header: X-Tenant}}, slots: 4}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: none{held}}}
""")
    return start([str(FAIRGATE), "serve", "-c", str(conf)], 1, env={"RUST_LOG": "warn"},
                 name=f"edge-fairgate-{port}")


def haproxy_pass(port, backend):
    conf = write(f"edge-haproxy-pass-{port}.cfg", f"""
global
  nbthread 1
  ulimit-n {FDS}
  maxconn {FDS // 2 - 100}
defaults
  mode tcp
  maxconn {FDS // 2 - 100}
  timeout connect 5s
  timeout client 300s
  timeout server 300s
frontend fe
  bind 127.0.0.1:{port}
  tcp-request inspect-delay 5s
  tcp-request content accept if {{ req_ssl_hello_type 1 }}
  use_backend be if {{ req_ssl_sni -i bench.test }}
backend be
  server tls 127.0.0.1:{backend}
""")
    return start(["haproxy", "-f", str(conf)], 1, name=f"edge-haproxy-pass-{port}")


def fairgate_pass(port, backend):
    home = Path(tempfile.mkdtemp(prefix=f"fg-pass-{port}-", dir=WORK)).name
    conf = write(f"{home}/fairgate.yaml", f"""
server:
  listen: ["127.0.0.1:{free_port()}"]
  threads: 1
  shutdown_grace: 1s
  max_connections: {FDS}
  max_connections_per_ip: {FDS}
  tls:
    listen: "127.0.0.1:{port}"
    passthrough: [{{hosts: [bench.test], upstream: tls}}]
store: {{kind: memory}}
acknowledge: [store.process_local]
default_limits: none
upstreams:
  tls: {{targets: ["127.0.0.1:{backend}"]}}
routes: []
""")
    return start([str(FAIRGATE), "serve", "-c", str(conf)], 1, env={"RUST_LOG": "warn"},
                 name=f"edge-fairgate-pass-{port}")


PASSERS = {"HAProxy": haproxy_pass, "fairgate": fairgate_pass}

# One full TLS 1.3 handshake naming bench.test and one GET per connection,
# for `seconds`; prints how many.
PASS_CLIENT = r"""
import socket, ssl, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
end, n = time.time() + seconds, 0
while time.time() < end:
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="bench.test", session=None) as tls:
            tls.sendall(b"GET / HTTP/1.0\r\nHost: bench.test\r\n\r\n")
            while tls.recv(4096):
                pass
    n += 1
print(n)
"""


def passed(port, pid, seconds):
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    out = subprocess.run(["taskset", "-c", "0", "python3", "-c", PASS_CLIENT, str(port),
                          str(seconds)], capture_output=True, text=True, check=True).stdout
    n = int(out.strip())
    cpu = cpu_seconds(pids) - cpu0
    return {"per_s": n / seconds, "cpu_us": cpu * 1e6 / max(n, 1)}


def tls_backend(cert):
    """nginx on CPU 0 ending TLS for bench.test, answering 200 itself."""
    port = free_port()
    conf = write(f"edge-tls-backend-{port}.conf", f"""
worker_processes 1;
daemon off;
pid {WORK}/edge-tls-backend-{port}.pid;
error_log {WORK}/edge-tls-backend-{port}.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server {{ listen 127.0.0.1:{port} ssl; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_certificate {cert[0]}; ssl_certificate_key {cert[1]};
    location / {{ return 200 "ok"; }} }}
}}""")
    start(["nginx", "-c", str(conf)], 0, name=f"edge-tls-backend-{port}")
    wait_port(port)
    return port


def bare(port, up, cert=None):
    return start([str(BARE_PINGORA), f"127.0.0.1:{port}", f"127.0.0.1:{up}"], 1,
                 name=f"edge-bare-{port}")


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        except (OSError, AttributeError):
            pass
    return total


def one_request(sock):
    sock.sendall(b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"ok\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError(f"closed after {answer[:60]!r}")
        answer += chunk


def idle(port, pid, n, tls):
    """KiB of the server's RSS per idle keep-alive connection (after one
    request each), 100 opened first so one-time growth is not counted."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

    def open_one():
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if tls:
            s = ctx.wrap_socket(s, server_hostname="bench.test")
        one_request(s)
        return s

    warm = [open_one() for _ in range(100)]
    time.sleep(0.5)
    before = rss_kib(tree(pid))
    held = [open_one() for _ in range(n)]
    time.sleep(0.5)
    after = rss_kib(tree(pid))
    for s in held + warm:
        s.close()
    return (after - before) / n


def s_time(port, mode, seconds):
    """openssl s_time: connections in `seconds`, each one GET."""
    out = subprocess.run(["taskset", "-c", "0", "openssl", "s_time", "-connect",
                          f"127.0.0.1:{port}", mode, "-time", str(seconds), "-www", "/"],
                         capture_output=True, text=True).stdout
    m = re.findall(r"(\d+) connections in ([\d.]+)s", out)
    if not m:
        raise RuntimeError(f"s_time on {port}: {out[-300:]}")
    return int(m[-1][0])


def handshakes(port, pid, mode, seconds):
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    n = s_time(port, mode, seconds)
    cpu = cpu_seconds(pids) - cpu0
    return {"per_s": n / seconds, "cpu_us": cpu * 1e6 / max(n, 1)}


def keepalive(port, pid, seconds):
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    cmd = ["taskset", "-c", "0", "wrk", "-t1", "-c32", f"-d{seconds}s",
           f"https://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    cpu = cpu_seconds(pids) - cpu0
    return {"per_s": requests / seconds, "cpu_us": cpu * 1e6 / max(requests, 1)}


def h2(port, pid, seconds):
    """h2load: 8 connections of 16 concurrent streams, over TLS (ALPN h2)."""
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    cmd = ["taskset", "-c", "0", "h2load", "-c8", "-m16", "-D", str(seconds),
           f"https://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out).group(1))
    if "Application protocol: h2" not in out:
        raise RuntimeError(f"h2load on {port} did not speak h2: {out[-300:]}")
    cpu = cpu_seconds(pids) - cpu0
    return {"per_s": done / seconds, "cpu_us": cpu * 1e6 / max(done, 1)}


def transfer(port, pid, direction, payload):
    """One BODY-byte upload (PUT of a sparse file) or download through the
    target with curl on CPU 0: MB/s and server CPU seconds per GiB. The
    upstream must have seen (or sent) every byte."""
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    cmd = ["taskset", "-c", "0", "curl", "-sS", "--fail", "-H", "X-Tenant: tenant-1",
           "-w", "\n%{time_total} %{size_upload} %{size_download}"]
    if direction == "upload":
        cmd += ["-T", str(payload), "-H", "Expect:", f"http://127.0.0.1:{port}/upload"]
    else:
        cmd += ["-o", "/dev/null", f"http://127.0.0.1:{port}/download?bytes={BODY}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pids) - cpu0
    seconds, up, down = out.rsplit("\n", 1)[1].split()
    moved = int(float(up if direction == "upload" else down))
    if moved != BODY or (direction == "upload" and f'"body_bytes":{BODY}' not in out):
        raise RuntimeError(f"{direction} on {port}: moved {moved} of {BODY}: {out[-300:]}")
    return {"mb_s": BODY / float(seconds) / 1e6, "cpu_gib": cpu * (1 << 30) / BODY}


def static_upstream():
    """nginx on CPU 0 serving `catalogue.json`: BODY/4 bytes of JSON lines
    (names, prices, stock; compresses about 5× at gzip level 1)."""
    site = WORK / "site"
    site.mkdir(exist_ok=True)
    size = BODY // 4
    with open(site / "catalogue.json", "w") as f:
        i, written = 0, 0
        while written < size:
            line = (f'{{"id":{i},"name":"Lamp model {i * 7919 % 10007}","price":{i * 31 % 997}.'
                    f'{i % 100:02d},"stock":{i * 13 % 211},"tags":["home","light"]}}\n')
            written += f.write(line)
            i += 1
    port = free_port()
    # Its worker reads the file: as this user (nginx run as root would
    # switch to nobody, who may not enter the work directory).
    conf = write("edge-static.conf", f"""
user {getpass.getuser()};
worker_processes 1;
daemon off;
pid {WORK}/edge-static.pid;
error_log {WORK}/edge-static.err warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  types {{ application/json json; }}
  sendfile on;
  server {{ listen 127.0.0.1:{port}; root {site}; }}
}}""")
    start(["nginx", "-c", str(conf)], 0, name="edge-static")
    wait_port(port)
    return port, (site / "catalogue.json").stat().st_size


def compressed(port, pid, size):
    """The catalogue through the target, gzip asked for, curl on CPU 0 (not
    decoding): MB/s and server CPU s per GiB, both of the decoded body."""
    pids = tree(pid)
    cpu0 = cpu_seconds(pids)
    cmd = ["taskset", "-c", "0", "curl", "-sS", "--fail", "-H", "Accept-Encoding: gzip",
           "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
           f"http://127.0.0.1:{port}/catalogue.json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pids) - cpu0
    seconds, down = out.split()
    if int(down) * 2 > size:
        raise RuntimeError(f"compressed download on {port}: {down} of {size} bytes: not compressed")
    return {"mb_s": size / float(seconds) / 1e6, "cpu_gib": cpu * (1 << 30) / size,
            "ratio": size / int(down)}


def echo_upstream():
    """`fairgate echo` on CPU 0: reads a whole body, or streams ?bytes=N."""
    port = free_port()
    start([str(FAIRGATE), "echo", "--listen", f"127.0.0.1:{port}"], 0, name="edge-echo")
    wait_port(port)
    return port


TARGETS = {"nginx": nginx, "HAProxy": haproxy, "fairgate": fairgate, "bare Pingora": bare}


def started(make, up, cert):
    port = free_port()
    p = make(port, up, cert)
    wait_port(port)
    return port, p


def measure(up, certs, echo, payload, static, backend):
    """Every measure, targets interleaved round after round; each its runs."""
    runs = {}

    def add(row, target, value):
        runs.setdefault((row, target), []).append(value)

    for _ in range(ROUNDS):
        for name, make in PASSERS.items():
            port = free_port()
            p = make(port, backend)
            wait_port(port)
            add("TLS passthrough by SNI, full handshake + GET", name, passed(port, p.pid, SECONDS))
            stop(p)
        for name, make in TARGETS.items():
            tls_targets = name != "bare Pingora"
            port, p = started(make, up, None)
            add("idle plain HTTP connection", name, idle(port, p.pid, IDLE, False))
            stop(p)
            slot = {"slot": True} if name == "fairgate" else {}
            port, p = started(lambda port, up, cert: make(port, up, cert, **slot), echo, None)
            for direction in ("upload", "download"):
                size = "1 GiB" if BODY == 1 << 30 else f"{BODY >> 20} MiB"
                add(f"{direction} ({size})", name, transfer(port, p.pid, direction, payload))
            stop(p)
            if name != "bare Pingora":
                gz = lambda port, up, cert: make(port, up, cert, gzip=True)  # noqa: E731
                port, p = started(gz, static[0], None)
                label = f"gzip download ({static[1] >> 20} MiB of JSON, level 1)"
                add(label, name, compressed(port, p.pid, static[1]))
                stop(p)
            if not tls_targets:
                continue
            for kind in ("ecdsa", "rsa"):
                port, p = started(make, up, certs[kind])
                label = "ECDSA P-256" if kind == "ecdsa" else "RSA-2048"
                add(f"full TLS 1.3 handshake, {label}", name,
                    handshakes(port, p.pid, "-new", SECONDS))
                if kind == "ecdsa":
                    add("resumed TLS 1.3 handshake", name,
                        handshakes(port, p.pid, "-reuse", SECONDS))
                    add("TLS 1.3 keep-alive requests", name, keepalive(port, p.pid, SECONDS))
                    add("HTTP/2 over TLS, 8 connections × 16 streams", name,
                        h2(port, p.pid, SECONDS))
                    add("idle TLS connection", name, idle(port, p.pid, IDLE, True))
                stop(p)
    return runs


def med(values, key=None):
    return statistics.median(v[key] if key else v for v in values)


def section(runs):
    lines = [SECTION, "",
             f"Medians of {ROUNDS} interleaved rounds ({SECONDS} s a target; {IDLE:,} idle "
             "connections), one worker thread pinned to CPU 1, the clients on CPU 0. "
             "nginx 1.22 and HAProxy 2.6 on OpenSSL 3.0, fairgate on rustls (aws-lc-rs); TLS 1.3, "
             "self-signed certificates. CPU is the servers' utime+stime from /proc. Ratios are "
             "to nginx. `bench/edge.py` (run by `bench/run`).", "",
             "| Row | Target | per second | server CPU µs each | ×nginx (per-core rate) | ×HAProxy |",
             "|---|---|---:|---:|---:|---:|"]
    rows = sorted({r for r, _ in runs}, key=lambda r: (r.startswith("idle"), r))
    bodies = [r for r in rows if r.startswith(("upload", "download", "gzip download"))]
    rows = [r for r in rows if r not in bodies]
    for row in rows:
        if row.startswith("idle"):
            continue
        base, peer = runs.get((row, "nginx")), runs.get((row, "HAProxy"))
        for target in TARGETS:
            vals = runs.get((row, target))
            if not vals:
                continue
            cpu = med(vals, "cpu_us")
            ratios = " | ".join(f"{med(b, 'cpu_us') / cpu:.2f}×" if b else "–" for b in (base, peer))
            lines.append(f"| {row} | {target} | {med(vals, 'per_s'):,.0f} | {cpu:,.1f} | {ratios} |")
    lines += ["", "| Idle keep-alive connection | Target | resident KiB each | ×nginx | ×HAProxy |",
              "|---|---|---:|---:|---:|"]
    for row in rows:
        if not row.startswith("idle"):
            continue
        base, peer = runs.get((row, "nginx")), runs.get((row, "HAProxy"))
        for target in TARGETS:
            vals = runs.get((row, target))
            if vals:
                ratios = " | ".join(f"{med(vals) / med(b):.2f}×" if b else "–" for b in (base, peer))
                lines.append(f"| {row} | {target} | {med(vals):,.1f} | {ratios} |")
    lines += ["", "Bodies: plain HTTP/1.1, curl on CPU 0, `fairgate echo` upstream; fairgate's "
              "route holds a concurrency slot (memory store); nginx streams "
              "(`proxy_request_buffering off`, `proxy_max_temp_file_size 0`). The gzip "
              "download: a static nginx upstream on CPU 0, curl asking for gzip and not "
              "decoding; MB/s and CPU are of the decoded body (HAProxy's gzip is libslz, "
              "whose level is fixed).", "",
              "| Transfer | Target | MB/s | server CPU s per GiB | ×nginx MB/s | ×HAProxy MB/s |",
              "|---|---|---:|---:|---:|---:|"]
    for row in bodies:
        base, peer = runs.get((row, "nginx")), runs.get((row, "HAProxy"))
        for target in TARGETS:
            vals = runs.get((row, target))
            if vals:
                ratios = " | ".join(f"{med(vals, 'mb_s') / med(b, 'mb_s'):.2f}×" if b else "–"
                                    for b in (base, peer))
                lines.append(f"| {row} | {target} | {med(vals, 'mb_s'):,.0f} | "
                             f"{med(vals, 'cpu_gib'):.2f} | {ratios} |")
    return "\n".join(lines) + "\n"


def main():
    if IDLE + 500 > FDS:
        raise SystemExit(f"{IDLE} idle connections need more than {FDS} open files (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (FDS, FDS))
    up = free_port()
    upstream(up)
    wait_port(up)
    certs = certificates()
    echo = echo_upstream()
    payload = WORK / "body.bin"
    with open(payload, "wb") as f:
        f.truncate(BODY)
    static = static_upstream()
    backend = tls_backend(certs["ecdsa"])
    try:
        runs = measure(up, certs, echo, payload, static, backend)
    finally:
        for p in bench.procs:
            stop(p)
    text = section(runs)
    print(text)
    if os.environ.get("EDGE_NO_DOCS") or bench.ONLY or bench.CANDIDATE:
        return
    doc = ROOT / "docs" / "benchmarks.md"
    old = doc.read_text()
    old = old.split(SECTION)[0].rstrip() + "\n\n"
    doc.write_text(old + text)


if __name__ == "__main__":
    main()
