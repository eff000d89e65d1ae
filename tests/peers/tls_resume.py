#!/usr/bin/env python3
"""N distinct TLS clients (OpenSSL, through Python's ssl) each make one
request, then each comes back with the session it was given and makes
another: prints how many first handshakes were full and how many returns
resumed, as JSON.

usage: tls_resume.py HOST PORT SNI CAFILE N {1.2|1.3}
"""
import json
import socket
import ssl
import sys


def request(ctx, host, port, sni, session=None):
    with socket.create_connection((host, port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni, session=session) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n".encode())
            # Read to the end: TLS 1.3 tickets come after the handshake.
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"not a 200: {answer[:80]!r}")
            return s.session, s.session_reused, s.version()


def main():
    host, port, sni, ca, n, version = sys.argv[1:7]
    ctx = ssl.create_default_context(cafile=ca)
    tls = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
    ctx.minimum_version = ctx.maximum_version = tls
    sessions, full = [], 0
    for _ in range(int(n)):
        session, reused, seen = request(ctx, host, int(port), sni)
        sessions.append(session)
        full += not reused
    resumed = 0
    for session in sessions:
        _, reused, seen = request(ctx, host, int(port), sni, session)
        resumed += reused
    print(json.dumps({"clients": int(n), "full": full, "resumed": resumed, "version": seen}))


if __name__ == "__main__":
    main()
