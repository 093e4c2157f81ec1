#!/usr/bin/env bash
# Serve the component with wasmtime-cli 48 and poke it with curl (loopback only).
# Usage: ./smoke.sh [path/to/http_wasi_p3_hello.wasm]
set -euo pipefail
WASM=${1:-$(dirname "$0")/../target/wasm32-wasip2/release/http_wasi_p3_hello.wasm}
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
TMP=$(mktemp -d)
wasmtime serve -Scli=y --addr 127.0.0.1:$PORT "$WASM" >"$TMP/serve.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
curl -sS -i "http://127.0.0.1:$PORT/"
head -c 6000 /dev/urandom | base64 > "$TMP/body"
curl -sS -X POST --data-binary @"$TMP/body" "http://127.0.0.1:$PORT/echo" -o "$TMP/out"
cmp "$TMP/body" "$TMP/out" && echo "POST echo ok ($(wc -c <"$TMP/out") bytes)"
seq 1 64 | xargs -P 16 -I{} curl -sS -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$PORT/{}" | sort | uniq -c
