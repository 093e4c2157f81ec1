// The conformance handler in JavaScript, written for StarlingMonkey's fetch event
// (`addEventListener('fetch', …)`) rather than exporting `wasi:http/incoming-handler`
// itself as ../js/handler.js does. The same routes, as far as the fetch API can say them:
//
//   GET|HEAD /hello     200 "hello\n"
//   POST /echo          the request body, as a stream: `new Response(request.body)`
//   GET /headers        the request's `x-odd` header back as `x-odd`, its bytes in hex as body
//   GET /latin1         200 with `x-odd: caf\xe9`, a header value that is not UTF-8
//   GET /stream/N       N bytes of a pattern (byte i is i % 251), a ReadableStream, no length
//   GET /trap           throws
//   GET /spin           computes forever
//   GET /outgoing       GET $BACKEND/backend with fetch(); its status, `x-backend` and body
//
// The fetch API's header values are ByteStrings: one character a byte, each below 256. So
// /headers writes the char codes it was given in hex, and /latin1 sets "caf\u00e9", which
// stands for the bytes 63 61 66 e9.
//
// componentize-js binds the fetch event to the WASI release its StarlingMonkey engine was
// built with, 0.2.10, so this handler is built against that WIT (./wit, from StarlingMonkey's
// host-apis/wasi-0.2.10), not the 0.2.12 WIT the other handlers use. Both servers accept
// components that import an older 0.2.x release.

import { getEnvironment } from 'wasi:cli/environment@0.2.10';

const PIECE = 64 * 1024;

// 64 KiB of the pattern, plus 250 bytes, so that a whole piece starts at any offset.
const PATTERN = new Uint8Array(PIECE + 251);
for (let i = 0; i < PATTERN.length; i++) PATTERN[i] = i % 251;

function text(status, body, headers = {}) {
  return new Response(body, { status, headers: { 'content-type': 'text/plain', ...headers } });
}

// N bytes of the pattern, a piece at a time, as the reader asks for them.
function generate(len) {
  let at = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (at >= len) {
        controller.close();
        return;
      }
      const skip = at % 251;
      const n = Math.min(len - at, PIECE);
      // A copy: a chunk handed to the stream is the stream's.
      controller.enqueue(PATTERN.slice(skip, skip + n));
      at += n;
    },
  });
  return new Response(body, { headers: { 'content-type': 'application/octet-stream' } });
}

function hex(value) {
  return Array.from(value, (c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join('');
}

// Read when a request comes, not at the top level: componentize-js runs the top level
// when it builds the component (Wizer), with the build's environment.
function backend() {
  for (const [name, value] of getEnvironment()) {
    if (name === 'BACKEND') return value;
  }
  return null;
}

async function outgoing() {
  const origin = backend();
  if (origin === null) return text(500, 'no BACKEND\n');
  const reply = await fetch(origin + '/backend');
  const body = await reply.text();
  return text(reply.status, body, { 'x-backend': reply.headers.get('x-backend') ?? '' });
}

function spin() {
  let x = 1;
  for (;;) x = (x * 1103515245 + 12345) | 0;
}

async function handle(request) {
  const path = new URL(request.url).pathname;
  if (path === '/hello') return text(200, 'hello\n');
  if (path === '/echo') {
    return new Response(request.body, {
      headers: { 'content-type': 'application/octet-stream' },
    });
  }
  if (path === '/headers') {
    const odd = request.headers.get('x-odd');
    if (odd === null) return text(400, 'no x-odd header\n');
    return text(200, hex(odd) + '\n', { 'x-odd': odd });
  }
  if (path === '/latin1') return text(200, 'ok\n', { 'x-odd': 'caf\u00e9' });
  if (path.startsWith('/stream/')) {
    const len = Number(path.slice('/stream/'.length));
    if (!Number.isSafeInteger(len) || len < 0) return text(400, 'bad length\n');
    return generate(len);
  }
  if (path === '/trap') throw new Error('the conformance handler throws on /trap');
  if (path === '/spin') spin();
  if (path === '/outgoing') return outgoing();
  return text(404, 'not found\n');
}

addEventListener('fetch', (event) => event.respondWith(handle(event.request)));
