#!/usr/bin/env python3
"""A real gRPC peer for fairgate's integration tests (grpcio, no generated code).

Messages are raw bytes both ways: the server registers generic handlers with
identity serializers and the client builds multi-callables without
(de)serializers, so no .proto file and no protoc are needed.

  grpc_peer.py serve --port P [--cert F --key F]
      gRPC server on 127.0.0.1:P (h2c, or TLS with --cert/--key); prints
      "ready <port>" once listening (P=0 picks a free port); SIGTERM stops it.
      Methods under /fairgate.test.Echo/:
        Unary         "echo:" + request; initial metadata
                      x-peer-saw-authorization: yes|no and
                      x-peer-saw-tenant: <x-tenant-id or "">; trailing
                      metadata x-peer-trailer: done
        ServerStream  request is an ASCII integer N; streams msg-0..msg-{N-1}
        ClientStream  answers "count=<n> bytes=<total bytes>"
        Bidi          answers "echo:" + m for each message m as it arrives
        Fail          INVALID_ARGUMENT "peer says no"
      With --pod NAME [--namespace NS] it is also the Gateway API
      conformance suite's gRPC echo backend: Echo and EchoTwo of
      gateway_api_conformance.echo_basic.grpcecho.GrpcEcho answer JSON bytes {fully_qualified_method, pod, namespace,
      authority, headers}; EchoThree is not implemented (UNIMPLEMENTED), as
      in the suite's echo-basic.

  grpc_peer.py call --target HOST:PORT --method /pkg.Svc/Name
        [--kind unary|server_stream|client_stream|bidi] [--message TEXT ...]
        [--metadata KEY=VALUE ...] [--ca FILE] [--authority NAME]
        [--timeout SECONDS] [--repeat N]
      Makes one call (or N, each on a channel of its own, one JSON line
      each) and prints one JSON object: code, code_number, details,
      initial_metadata, trailing_metadata, responses. Exits 0 whatever the
      gRPC status; exits 2 on a usage error only.
"""

import argparse
import json
import queue
import signal
import sys
import threading
from concurrent import futures

try:
    import grpc
except ImportError:  # pragma: no cover - environment problem, not a test result
    sys.stderr.write("grpc_peer: the grpcio package is missing (run scripts/deps)\n")
    sys.exit(2)

SERVICE = "fairgate.test.Echo"
KINDS = ("unary", "server_stream", "client_stream", "bidi")


# ---------------------------------------------------------------- server side


def _metadata_value(context, key):
    for k, v in context.invocation_metadata():
        if k == key:
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return None


def unary(request, context):
    saw_auth = _metadata_value(context, "authorization") is not None
    tenant = _metadata_value(context, "x-tenant-id") or ""
    context.send_initial_metadata(
        (
            ("x-peer-saw-authorization", "yes" if saw_auth else "no"),
            ("x-peer-saw-tenant", tenant),
        )
    )
    context.set_trailing_metadata((("x-peer-trailer", "done"),))
    return b"echo:" + request


def server_stream(request, context):
    try:
        n = int(request.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ServerStream wants an ASCII integer")
    for i in range(n):
        yield b"msg-%d" % i


def client_stream(request_iterator, context):
    count = 0
    total = 0
    for message in request_iterator:
        count += 1
        total += len(message)
    return b"count=%d bytes=%d" % (count, total)


def bidi(request_iterator, context):
    for message in request_iterator:
        yield b"echo:" + message


def fail(request, context):
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "peer says no")


CONFORMANCE = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"


def conformance_echo(pod, namespace, method):
    def answer(request, context):
        headers = {}
        for k, v in context.invocation_metadata():
            headers[k] = _text(v)
        return json.dumps({
            "fully_qualified_method": "/%s/%s" % (CONFORMANCE, method),
            "pod": pod,
            "namespace": namespace,
            "authority": headers.get(":authority", ""),
            "headers": headers,
        }).encode("utf-8")
    return grpc.unary_unary_rpc_method_handler(answer)


def serve(args):
    if bool(args.cert) != bool(args.key):
        usage_error("serve: --cert and --key go together")
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
            "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
            "Fail": grpc.unary_unary_rpc_method_handler(fail),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    if args.pod:
        echo = grpc.method_handlers_generic_handler(
            CONFORMANCE,
            {m: conformance_echo(args.pod, args.namespace, m) for m in ("Echo", "EchoTwo")},
        )
        server.add_generic_rpc_handlers((echo,))
    address = "127.0.0.1:%d" % args.port
    if args.cert:
        credentials = grpc.ssl_server_credentials(
            ((read_file(args.key), read_file(args.cert)),)
        )
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        sys.stderr.write("grpc_peer: could not listen on %s\n" % address)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    sys.stdout.write("ready %d\n" % port)
    sys.stdout.flush()
    # Event.wait with a timeout so the Python signal handler gets to run.
    while not stop.wait(0.5):
        pass
    server.stop(grace=1).wait()
    return 0


# ---------------------------------------------------------------- client side


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if value is not None else ""


def metadata_dict(metadata):
    out = {}
    for key, value in metadata or ():
        value = _text(value)
        out[key] = out[key] + "," + value if key in out else value
    return out


class Outcome:
    """What one call saw: the call object (for status and metadata) and the
    messages received, kept even when the call later fails."""

    def __init__(self):
        self.call = None
        self.error = None
        self.responses = []

    def to_json(self):
        source = self.error if self.error is not None else self.call
        code = source.code() if source is not None else grpc.StatusCode.UNKNOWN
        initial = trailing = ()
        if source is not None:
            initial = source.initial_metadata()
            trailing = source.trailing_metadata()
        return {
            "code": code.name,
            "code_number": code.value[0],
            "details": _text(source.details() if source is not None else ""),
            "initial_metadata": metadata_dict(initial),
            "trailing_metadata": metadata_dict(trailing),
            "responses": [_text(r) for r in self.responses],
        }


def call_unary(channel, path, messages, kw, out):
    response, out.call = channel.unary_unary(path).with_call(messages[0], **kw)
    out.responses.append(response)


def call_server_stream(channel, path, messages, kw, out):
    out.call = channel.unary_stream(path)(messages[0], **kw)
    for response in out.call:
        out.responses.append(response)


def call_client_stream(channel, path, messages, kw, out):
    response, out.call = channel.stream_unary(path).with_call(iter(messages), **kw)
    out.responses.append(response)


def call_bidi(channel, path, messages, kw, out):
    # Send one message, wait for its answer, then send the next: the request
    # generator is fed from a queue, so the exchange is really interleaved.
    outbox = queue.Queue()
    done = object()

    def requests():
        while True:
            message = outbox.get()
            if message is done:
                return
            yield message

    out.call = channel.stream_stream(path)(requests(), **kw)
    try:
        for message in messages:
            outbox.put(message)
            out.responses.append(next(out.call))
    except StopIteration:
        pass
    finally:
        outbox.put(done)
    for response in out.call:  # anything the server sends after half-close
        out.responses.append(response)


CALLERS = {
    "unary": call_unary,
    "server_stream": call_server_stream,
    "client_stream": call_client_stream,
    "bidi": call_bidi,
}


def guess_kind(method):
    name = method.rsplit("/", 1)[-1]
    return {
        "ServerStream": "server_stream",
        "ClientStream": "client_stream",
        "Bidi": "bidi",
    }.get(name, "unary")


def parse_metadata(items):
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            usage_error("call: --metadata wants KEY=VALUE, got %r" % item)
        pairs.append((key.lower(), value))
    return pairs


def open_channel(args):
    options = []
    if args.authority:
        options.append(("grpc.default_authority", args.authority))
    if args.ca:
        if args.authority:
            options.append(("grpc.ssl_target_name_override", args.authority))
        credentials = grpc.ssl_channel_credentials(root_certificates=read_file(args.ca))
        return grpc.secure_channel(args.target, credentials, options=options)
    return grpc.insecure_channel(args.target, options=options)


def call(args):
    if not args.method.startswith("/") or args.method.count("/") != 2:
        usage_error("call: --method wants a full path like /%s/Unary" % SERVICE)
    kind = args.kind or guess_kind(args.method)
    messages = [m.encode("utf-8") for m in args.message]
    if not messages and kind in ("unary", "server_stream"):
        messages = [b"3" if kind == "server_stream" else b"hi"]
    kw = {"metadata": parse_metadata(args.metadata), "timeout": args.timeout}
    for _ in range(max(1, args.repeat)):
        out = Outcome()
        channel = open_channel(args)
        try:
            CALLERS[kind](channel, args.method, messages, kw, out)
        except grpc.RpcError as e:
            out.error = e
        finally:
            channel.close()
        sys.stdout.write(json.dumps(out.to_json()) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------- command line


def read_file(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        usage_error("cannot read %s: %s" % (path, e.strerror))


def usage_error(message):
    sys.stderr.write("grpc_peer: %s\n" % message)
    sys.exit(2)


def main(argv):
    parser = argparse.ArgumentParser(prog="grpc_peer.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the Echo service")
    s.add_argument("--port", type=int, required=True, help="0 picks a free port")
    s.add_argument("--cert", help="PEM certificate chain: serve TLS")
    s.add_argument("--key", help="PEM private key for --cert")
    s.add_argument("--pod", help="also serve the conformance echo, answering as this pod")
    s.add_argument("--namespace", default="", help="the conformance echo's namespace")

    c = sub.add_parser("call", help="make one call and print it as JSON")
    c.add_argument("--target", required=True, help="HOST:PORT")
    c.add_argument("--method", required=True, help="full path, e.g. /%s/Unary" % SERVICE)
    c.add_argument("--kind", choices=KINDS, help="default: from the method name, else unary")
    c.add_argument("--message", action="append", default=[],
                   help="repeatable; unary defaults to 'hi', server_stream to '3'")
    c.add_argument("--metadata", action="append", default=[], help="KEY=VALUE, repeatable")
    c.add_argument("--ca", help="PEM CA file: use TLS")
    c.add_argument("--authority", help=":authority (and TLS name with --ca)")
    c.add_argument("--timeout", type=float, default=10.0, help="seconds, whole call (10)")
    c.add_argument("--repeat", type=int, default=1, help="calls, each on a new channel (1)")

    args = parser.parse_args(argv)
    return serve(args) if args.command == "serve" else call(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
