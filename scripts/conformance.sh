#!/usr/bin/env bash
# The conformance run: the same wasi:http handler, written here in JavaScript, Python and
# Rust (guests/conformance/), served by `lrpc serve` and by `wasmtime serve`; the same
# requests to both; their answers compared. Writes bench-results/conformance.json and
# bench-results/CONFORMANCE.md. Not part of scripts/test.sh: it needs wasmtime-cli and npm.
#
#   scripts/conformance.sh          build the handlers, run every case, write the results
#   scripts/conformance.sh build    only build the handlers, into target/conformance/
#
# Needs Rust, Python 3, and Node.js with npm (for the JavaScript handler; without them that
# handler is reported as not built). Installs, each once: wasmtime-cli (cargo install),
# componentize-js (npm, into target/tools/componentize-js) and componentize-py (pip, into
# target/tools/venv, as scripts/test.sh does). Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

WASMTIME_VERSION=48.0.8
COMPONENTIZE_JS_VERSION=0.23.0
COMPONENTIZE_PY_VERSION=0.25.1
# One deadline for a handler under both servers: lrpc's `deadline`, wasmtime's `-W timeout`.
DEADLINE=5s

root=$PWD
tools=$root/target/tools
work=$root/target/conformance
src=$root/guests/conformance
mkdir -p "$work/logs"

say() { echo "conformance: $*" >&2; }

# Why a handler was not built, by language; reported in CONFORMANCE.md.
declare -A unavailable=()

# The WIT the handlers are built against: our world, and the WASI 0.2 packages that
# wasmtime-wasi-http 48 (a dependency of the runtime) carries, so that the handlers use the
# WASI release both servers implement.
wit_dir() {
    local http_dir
    http_dir=$(cargo metadata --format-version 1 --locked --manifest-path "$root/Cargo.toml" |
        python3 -c 'import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "wasmtime-wasi-http":
        print(os.path.dirname(p["manifest_path"]))
        break')
    [ -d "$http_dir/wit/deps" ] || { say "no WIT in wasmtime-wasi-http ($http_dir)"; return 1; }
    rm -rf "$work/wit"
    mkdir -p "$work/wit/deps"
    cp "$http_dir"/wit/deps/*.wit "$work/wit/deps/"
    cp "$src/wit/world.wit" "$work/wit/"
}

# Whether $1 exists and is newer than each of the other files: a handler is built again
# only when its sources or the WIT changed.
fresh() {
    local out=$1 f
    shift
    [ -f "$out" ] || return 1
    for f in "$@"; do [ "$f" -ot "$out" ] || return 1; done
}

build_rust() {
    say "building the Rust handler"
    cargo build -q --release --locked --manifest-path "$src/rust/Cargo.toml" \
        --target wasm32-wasip2 --target-dir "$root/target/guests"
    cp "$root/target/guests/wasm32-wasip2/release/conformance_handler.wasm" "$work/handler-rust.wasm"
}

build_py() {
    local venv=$tools/venv
    if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY_VERSION"; then
        say "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv"
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            "componentize-py==$COMPONENTIZE_PY_VERSION"
    fi
    fresh "$work/handler-py.wasm" "$src/py/app.py" "$src/wit/world.wit" && return 0
    say "building the Python handler"
    # From a copy: componentize-py leaves a __pycache__ beside the sources it reads.
    rm -rf "$work/py"
    cp -r "$src/py" "$work/py"
    "$venv/bin/componentize-py" -q -d "$work/wit" -w handler \
        componentize -p "$work/py" app -o "$work/handler-py.wasm"
}

build_js() {
    local dir=$tools/componentize-js
    local bin=$dir/node_modules/.bin/componentize-js
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        unavailable[js]="Node.js and npm are not on PATH: \`@bytecodealliance/componentize-js\` could not be installed."
        return 0
    fi
    if ! "$bin" --version 2>/dev/null | grep -q "$COMPONENTIZE_JS_VERSION"; then
        say "installing componentize-js $COMPONENTIZE_JS_VERSION into $dir"
        mkdir -p "$dir"
        if ! (cd "$dir" && npm install --no-audit --no-fund --silent \
            "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION") >"$work/logs/npm.log" 2>&1; then
            unavailable[js]="\`npm install @bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION\` failed: $(tail -3 "$work/logs/npm.log" | tr '\n' ' ')"
            return 0
        fi
    fi
    fresh "$work/handler-js.wasm" "$src/js/handler.js" "$src/wit/world.wit" && return 0
    say "building the JavaScript handler"
    if ! "$bin" "$src/js/handler.js" --wit "$work/wit" -n handler -o "$work/handler-js.wasm" \
        >"$work/logs/componentize-js.log" 2>&1; then
        unavailable[js]="componentize-js $COMPONENTIZE_JS_VERSION failed to build the handler: $(tail -3 "$work/logs/componentize-js.log" | tr '\n' ' ')"
        rm -f "$work/handler-js.wasm"
    fi
}

build_all() {
    wit_dir
    build_rust
    build_py
    build_js
}

if [ "${1:-}" = build ]; then
    build_all
    for lang in "${!unavailable[@]}"; do say "$lang not built: ${unavailable[$lang]}"; done
    exit 0
fi

if ! wasmtime --version 2>/dev/null | grep -q "$WASMTIME_VERSION"; then
    say "installing wasmtime-cli $WASMTIME_VERSION"
    cargo install --locked wasmtime-cli --version "$WASMTIME_VERSION"
fi
build_all
say "building lrpc"
cargo build -q --release -p lrpc-runtime

# Ports of their own, away from the edge benchmark's (18181–18184).
backend_port=18290
lrpc_addr=127.0.0.1:18291
wt_addr=127.0.0.1:18292
backend=http://127.0.0.1:$backend_port

# The servers running now; each is emptied once stopped, so that the exit trap signals
# only processes this script started and has not yet reaped.
backend_pid= lrpc_pid= wt_pid=
stop() {
    local p
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
# shellcheck disable=SC2086 # the empty ones vanish
trap 'stop $backend_pid $lrpc_pid $wt_pid' EXIT

python3 scripts/conformance.py backend "$backend_port" &
backend_pid=$!

# Waits until $1 answers 200 on /hello: the first start compiles the handler (wasmtime keeps
# its compiled code in its cache; lrpc in the cache-dir of the config below).
wait_up() {
    local _
    for _ in $(seq 1 600); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/hello")" = 200 ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

results=()
for lang in js py rust; do
    wasm=$work/handler-$lang.wasm
    [ -z "${unavailable[$lang]:-}" ] && [ -f "$wasm" ] || continue
    config=$work/lrpc-$lang.toml
    # The handler alone on `/`, so that it sees the same paths under both servers. The
    # echo cases send up to 64 MiB: the route's max-body allows 128 MiB.
    cat >"$config" <<TOML
[kernel]
cache-dir = "cache"

[serve]
listen = "$lrpc_addr"

[domains.app]
wasm = "handler-$lang.wasm"
exports = [{ interface = "wasi:http/incoming-handler" }]

[domains.app.wasi]
env = { BACKEND = "$backend" }
http = ["$backend"]
stderr = "inherit"

[domains.app.limits]
deadline = "$DEADLINE"

[[routes]]
prefix = "/"
chain = ["app"]
max-body = 134217728
TOML
    say "$lang: starting lrpc serve and wasmtime serve"
    target/release/lrpc serve "$config" >"$work/logs/lrpc-$lang.log" 2>&1 &
    lrpc_pid=$!
    # -Scli: the handlers import wasi:cli (environment) besides the proxy world.
    wasmtime serve -Scli -W timeout="$DEADLINE" --addr "$wt_addr" --env "BACKEND=$backend" \
        "$wasm" >"$work/logs/wasmtime-$lang.log" 2>&1 &
    wt_pid=$!
    if ! wait_up "http://$lrpc_addr" "$lrpc_pid" || ! wait_up "http://$wt_addr" "$wt_pid"; then
        say "$lang: a server did not come up (logs in $work/logs)"
        exit 1
    fi
    python3 scripts/conformance.py run "$lang" "http://$lrpc_addr" "http://$wt_addr" \
        "$work/results-$lang.json"
    results+=("$work/results-$lang.json")
    stop "$lrpc_pid" "$wt_pid"
    lrpc_pid= wt_pid=
done

# Why a handler was not built, for the report; it reads the handlers' sizes itself.
rm -f "$work"/why-*.txt
for lang in "${!unavailable[@]}"; do printf '%s\n' "${unavailable[$lang]}" >"$work/why-$lang.txt"; done
mkdir -p bench-results
python3 scripts/conformance.py report bench-results "$work" "$DEADLINE" "$(wasmtime --version)" \
    "${results[@]}"
cat bench-results/CONFORMANCE.md
