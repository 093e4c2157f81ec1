// The conformance handler in JavaScript, made a component by componentize-js. It exports
// `wasi:http/incoming-handler` itself, with the same routes as ../py/app.py and
// ../rust/src/lib.rs; scripts/conformance.sh sends the same requests to it under
// `lrpc serve` and `wasmtime serve` and compares the answers.
//
//   GET|HEAD /hello     200 "hello\n"
//   POST /echo          the request body, streamed back as it arrives
//   GET /headers        the request's `x-odd` header back as `x-odd`, its bytes in hex as body
//   GET /latin1         200 with `x-odd: caf\xe9`, a header value that is not UTF-8
//   GET /stream/N       N bytes of a pattern (byte i is i % 251), streamed, no length
//   GET /trap           throws
//   GET /spin           computes forever
//   GET /outgoing       GET $BACKEND/backend with fetch(); its status, `x-backend` and body
//
// The handler exports the interface directly, rather than through StarlingMonkey's fetch
// event: the engine's fetch event is bound to the WASI release it was built with, and the
// WIT the conformance run ships is the one wasmtime-wasi-http 48 carries.

import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import {
  Fields,
  OutgoingBody,
  OutgoingResponse,
  ResponseOutparam,
} from 'wasi:http/types@0.2.12';

const PIECE = 64 * 1024;
const encoder = new TextEncoder();

// 64 KiB of the pattern, plus 250 bytes, so that a whole piece starts at any offset.
const PATTERN = new Uint8Array(PIECE + 251);
for (let i = 0; i < PATTERN.length; i++) PATTERN[i] = i % 251;

// Sets the response (status, headers) and returns its body's stream and the body.
function start(out, status, headers) {
  const fields = Fields.fromList(headers.map(([name, value]) => [name, bytes(value)]));
  const response = new OutgoingResponse(fields);
  response.setStatusCode(status);
  const body = response.body();
  ResponseOutparam.set(out, { tag: 'ok', val: response });
  return [body.write(), body];
}

function bytes(value) {
  return typeof value === 'string' ? encoder.encode(value) : value;
}

// Writes all of `data`, as fast as the stream takes it.
function writeAll(stream, data) {
  while (data.length > 0) {
    let n = Number(stream.checkWrite());
    if (n === 0) {
      // Dropped at once: a pollable left to the garbage collector outlives its stream, and
      // dropping a stream that still has pollables traps.
      const ready = stream.subscribe();
      ready.block();
      ready[Symbol.dispose]();
      continue;
    }
    n = Math.min(n, data.length);
    stream.write(data.subarray(0, n));
    data = data.subarray(n);
  }
}

// Flushes the stream, then finishes the body: the response is complete.
function finish(stream, body) {
  stream.blockingFlush();
  stream[Symbol.dispose]();
  OutgoingBody.finish(body, undefined);
}

function answer(out, status, text, headers = []) {
  const [stream, body] = start(out, status, [['content-type', 'text/plain'], ...headers]);
  writeAll(stream, encoder.encode(text));
  finish(stream, body);
}

function echo(request, out) {
  const [stream, body] = start(out, 200, [['content-type', 'application/octet-stream']]);
  const incoming = request.consume();
  const input = incoming.stream();
  for (;;) {
    let piece;
    try {
      piece = input.blockingRead(BigInt(PIECE));
    } catch (e) {
      // `closed` ends the body; anything else is a failed read, left unfinished.
      if (e.payload && e.payload.tag === 'closed') break;
      throw e;
    }
    writeAll(stream, piece);
  }
  finish(stream, body);
}

function generate(out, len) {
  const [stream, body] = start(out, 200, [['content-type', 'application/octet-stream']]);
  for (let at = 0; at < len; ) {
    const skip = at % 251;
    const n = Math.min(len - at, PIECE);
    writeAll(stream, PATTERN.subarray(skip, skip + n));
    at += n;
  }
  finish(stream, body);
}

function hex(value) {
  return Array.from(value, (b) => b.toString(16).padStart(2, '0')).join('');
}

function backend() {
  for (const [name, value] of getEnvironment()) {
    if (name === 'BACKEND') return value;
  }
  return null;
}

async function outgoing(out) {
  const origin = backend();
  if (origin === null) return answer(out, 500, 'no BACKEND\n');
  const reply = await fetch(origin + '/backend');
  const text = await reply.text();
  answer(out, reply.status, text, [['x-backend', reply.headers.get('x-backend') ?? '']]);
}

function spin() {
  let x = 1;
  for (;;) x = (x * 1103515245 + 12345) | 0;
}

export const incomingHandler = {
  async handle(request, out) {
    const path = (request.pathWithQuery() ?? '/').split('?')[0];
    if (path === '/hello') return answer(out, 200, 'hello\n');
    if (path === '/echo') return echo(request, out);
    if (path === '/headers') {
      const odd = request.headers().get('x-odd');
      if (odd.length === 0) return answer(out, 400, 'no x-odd header\n');
      return answer(out, 200, hex(odd[0]) + '\n', [['x-odd', odd[0]]]);
    }
    if (path === '/latin1') {
      return answer(out, 200, 'ok\n', [['x-odd', new Uint8Array([0x63, 0x61, 0x66, 0xe9])]]);
    }
    if (path.startsWith('/stream/')) {
      const len = Number(path.slice('/stream/'.length));
      if (!Number.isSafeInteger(len) || len < 0) return answer(out, 400, 'bad length\n');
      return generate(out, len);
    }
    if (path === '/trap') throw new Error('the conformance handler throws on /trap');
    if (path === '/spin') spin();
    if (path === '/outgoing') return outgoing(out);
    return answer(out, 404, 'not found\n');
  },
};
