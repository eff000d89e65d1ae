"""Serves the files of a directory over HTTPS on 127.0.0.1, as a private
identity provider serves its JWKS: `https_files.py DIR CERT KEY`. Prints
`listening on PORT` once ready; serves until killed. HTTP/1.1, so a client
keeps its connection for the next request, as with a real server."""
import http.server
import ssl
import sys
from functools import partial

directory, cert, key = sys.argv[1:4]
http.server.SimpleHTTPRequestHandler.protocol_version = "HTTP/1.1"
handler = partial(http.server.SimpleHTTPRequestHandler, directory=directory)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
