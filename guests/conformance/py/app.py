"""The conformance handler in Python, made a component by componentize-py.

It exports `wasi:http/incoming-handler` with the same routes as ../js/handler.js and
../rust/src/lib.rs; scripts/conformance.sh sends the same requests to it under
`lrpc serve` and `wasmtime serve` and compares the answers.

  GET|HEAD /hello     200 "hello\\n"
  POST /echo          the request body, streamed back as it arrives
  GET /headers        the request's `x-odd` header back as `x-odd`, its bytes in hex as body
  GET /latin1         200 with `x-odd: caf\\xe9`, a header value that is not UTF-8
  GET /stream/N       N bytes of a pattern (byte i is i % 251), streamed, no length
  GET /trap           raises
  GET /spin           computes forever
  GET /outgoing       GET $BACKEND/backend; its status, `x-backend` header and body

It blocks on the streams rather than running an event loop: one request at a time needs
nothing more.
"""

from typing import List, Optional, Tuple

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import environment, outgoing_handler, streams, types

PIECE = 64 * 1024

# 64 KiB of the pattern, plus 250 bytes, so that a whole piece starts at any offset.
PATTERN = bytes(i % 251 for i in range(PIECE + 251))


def start(
    out: types.ResponseOutparam, status: int, headers: List[Tuple[str, bytes]]
) -> Tuple[streams.OutputStream, types.OutgoingBody]:
    """Sets the response (status, headers); its body's stream and the body."""
    response = types.OutgoingResponse(types.Fields.from_list(headers))
    response.set_status_code(status)
    body = response.body()
    types.ResponseOutparam.set(out, Ok(response))
    return body.write(), body


def write_all(stream: streams.OutputStream, data: bytes) -> None:
    """Writes all of `data`, as fast as the stream takes it."""
    view = memoryview(data)
    while view:
        n = stream.check_write()
        if n == 0:
            stream.subscribe().block()
            continue
        n = min(n, len(view))
        stream.write(bytes(view[:n]))
        view = view[n:]


def finish(stream: streams.OutputStream, body: types.OutgoingBody) -> None:
    """Flushes the stream, then finishes the body: the response is complete."""
    stream.blocking_flush()
    stream.__exit__(None, None, None)
    types.OutgoingBody.finish(body, None)


def answer(
    out: types.ResponseOutparam,
    status: int,
    text: bytes,
    headers: Optional[List[Tuple[str, bytes]]] = None,
) -> None:
    stream, body = start(out, status, [("content-type", b"text/plain")] + (headers or []))
    write_all(stream, text)
    finish(stream, body)


def read_all(body: types.IncomingBody) -> bytes:
    """The whole of a body; a failed read raises."""
    stream = body.stream()
    pieces = []
    while True:
        try:
            pieces.append(stream.blocking_read(PIECE))
        except Err as e:
            if isinstance(e.value, streams.StreamError_Closed):
                return b"".join(pieces)
            raise


def echo(request: types.IncomingRequest, out: types.ResponseOutparam) -> None:
    stream, body = start(out, 200, [("content-type", b"application/octet-stream")])
    incoming = request.consume()
    source = incoming.stream()
    while True:
        try:
            piece = source.blocking_read(PIECE)
        except Err as e:
            # `closed` ends the body; anything else is a failed read, left unfinished.
            if isinstance(e.value, streams.StreamError_Closed):
                break
            raise
        write_all(stream, piece)
    finish(stream, body)


def generate(out: types.ResponseOutparam, length: int) -> None:
    stream, body = start(out, 200, [("content-type", b"application/octet-stream")])
    at = 0
    while at < length:
        skip = at % 251
        n = min(length - at, PIECE)
        write_all(stream, PATTERN[skip : skip + n])
        at += n
    finish(stream, body)


def backend() -> Optional[str]:
    # Read at each request: componentize-py runs the module's top level when it builds the
    # component, so a variable read there would be the build machine's.
    for name, value in environment.get_environment():
        if name == "BACKEND":
            return value
    return None


def outgoing(out: types.ResponseOutparam) -> None:
    origin = backend()
    if origin is None:
        answer(out, 500, b"no BACKEND\n")
        return
    scheme, _, authority = origin.partition("://")
    request = types.OutgoingRequest(types.Fields())
    request.set_scheme(types.Scheme_Https() if scheme == "https" else types.Scheme_Http())
    request.set_authority(authority)
    request.set_path_with_query("/backend")
    types.OutgoingBody.finish(request.body(), None)
    future = outgoing_handler.handle(request, None)
    while True:
        got = future.get()
        if got is not None:
            break
        future.subscribe().block()
    # Ok(Ok(response)), or an error code: raising it fails the handler, as a throw does.
    if not isinstance(got, Ok) or not isinstance(got.value, Ok):
        raise RuntimeError(f"outgoing request failed: {got}")
    response = got.value.value
    status = response.status()
    tag = response.headers().get("x-backend")
    text = read_all(response.consume())
    answer(out, status, text, [("x-backend", tag[0] if tag else b"")])


def spin() -> None:
    x = 1
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: types.IncomingRequest, out: types.ResponseOutparam) -> None:
        path = (request.path_with_query() or "/").split("?")[0]
        if path == "/hello":
            answer(out, 200, b"hello\n")
        elif path == "/echo":
            echo(request, out)
        elif path == "/headers":
            odd = request.headers().get("x-odd")
            if not odd:
                answer(out, 400, b"no x-odd header\n")
            else:
                answer(out, 200, odd[0].hex().encode() + b"\n", [("x-odd", odd[0])])
        elif path == "/latin1":
            answer(out, 200, b"ok\n", [("x-odd", b"caf\xe9")])
        elif path.startswith("/stream/"):
            try:
                length = int(path[len("/stream/") :])
            except ValueError:
                length = -1
            if length < 0:
                answer(out, 400, b"bad length\n")
            else:
                generate(out, length)
        elif path == "/trap":
            raise RuntimeError("the conformance handler raises on /trap")
        elif path == "/spin":
            spin()
        elif path == "/outgoing":
            outgoing(out)
        else:
            answer(out, 404, b"not found\n")
