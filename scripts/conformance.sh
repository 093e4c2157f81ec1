#!/usr/bin/env bash
# The conformance run: the same wasi:http handler, written here in JavaScript (twice: `js`
# exports wasi:http/incoming-handler itself, `js-fetch` uses StarlingMonkey's fetch event),
# Python and Rust (guests/conformance/), served by `lrpc serve` and by `wasmtime serve`; the
# same requests to both; their answers compared. Writes bench-results/conformance.json and
# bench-results/CONFORMANCE.md. Not part of scripts/test.sh: it needs wasmtime and npm.
#
#   scripts/conformance.sh          build the handlers, run every case, write the results
#   scripts/conformance.sh build    only build the handlers, into target/conformance/
#
# Needs Rust, Python 3, and Node.js with npm (for the JavaScript handlers; without them those
# handlers are reported as not built). Installs, each once: wasmtime (scripts/wasmtime.sh),
# componentize-js (npm, into target/tools/componentize-js) and componentize-py (pip, into
# target/tools/venv, as scripts/test.sh does). Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# Installs componentize-js once, for both JavaScript handlers; false (with the reason in
# unavailable[js] and unavailable[js-fetch]) if it can not.
install_componentize_js() {
    local dir=$tools/componentize-js
    local bin=$dir/node_modules/.bin/componentize-js
    local why=
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        why="Node.js and npm are not on PATH: \`@bytecodealliance/componentize-js\` could not be installed."
    elif ! "$bin" --version 2>/dev/null | grep -q "$COMPONENTIZE_JS_VERSION"; then
        say "installing componentize-js $COMPONENTIZE_JS_VERSION into $dir"
        mkdir -p "$dir"
        if ! (cd "$dir" && npm install --no-audit --no-fund --silent \
            "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION") >"$work/logs/npm.log" 2>&1; then
            why="\`npm install @bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION\` failed: $(tail -3 "$work/logs/npm.log" | tr '\n' ' ')"
        fi
    fi
    [ -z "$why" ] && return 0
    unavailable[js]=$why
    unavailable[js-fetch]=$why
    return 1
}

# componentize-js SOURCE WIT-DIR LANG: builds handler-LANG.wasm from the world `handler`.
componentize_js() {
    local log=$work/logs/componentize-$3.log
    if ! "$tools/componentize-js/node_modules/.bin/componentize-js" "$1" --wit "$2" -n handler \
        -o "$work/handler-$3.wasm" >"$log" 2>&1; then
        unavailable[$3]="componentize-js $COMPONENTIZE_JS_VERSION failed to build the handler: $(tail -3 "$log" | tr '\n' ' ')"
        rm -f "$work/handler-$3.wasm"
    fi
}

build_js() {
    install_componentize_js || return 0
    if ! fresh "$work/handler-js.wasm" "$src/js/handler.js" "$src/wit/world.wit"; then
        say "building the JavaScript handler"
        componentize_js "$src/js/handler.js" "$work/wit" js
    fi
    # The fetch-event handler, against the WASI 0.2.10 WIT beside it (see its world.wit):
    # componentize-js attaches StarlingMonkey's fetch event to an export of
    # wasi:http/incoming-handler of the release its engine binds, and the source exports
    # nothing itself.
    local wits=("$src/js-fetch/wit/world.wit" "$src"/js-fetch/wit/deps/*.wit)
    fresh "$work/handler-js-fetch.wasm" "$src/js-fetch/handler.js" "${wits[@]}" && return 0
    say "building the JavaScript fetch-event handler"
    componentize_js "$src/js-fetch/handler.js" "$src/js-fetch/wit" js-fetch
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

# The peer, wasmtime 48.0.2, prebuilt (scripts/wasmtime.sh); first on PATH.
wasmtime_bin=$(scripts/wasmtime.sh)
export PATH="$(dirname "$wasmtime_bin"):$PATH"
build_all
say "building lrpc"
cargo build -q --release -p lrpc-runtime

# Ports of their own, away from the edge benchmark's (18181–18184).
backend_port=18290
lrpc_addr=127.0.0.1:18291
wt_addr=127.0.0.1:18292
wt_reuse_addr=127.0.0.1:18293
backend=http://127.0.0.1:$backend_port
# The requests one instance serves in the cases marked `reused` (conformance.py): lrpc's
# route /reuse and a second `wasmtime serve`. Elsewhere each request gets a fresh instance.
REUSE=1000

# The servers running now; each is emptied once stopped, so that the exit trap signals
# only processes this script started and has not yet reaped.
backend_pid= lrpc_pid= wt_pid= wt_reuse_pid=
stop() {
    local p
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
# shellcheck disable=SC2086 # the empty ones vanish
trap 'stop $backend_pid $lrpc_pid $wt_pid $wt_reuse_pid' EXIT

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

# Waits until `wasmtime serve` (pid $2) says in its log $1 that it listens: unlike wait_up,
# without a request, so that the `reused` cases find no instance in use yet.
wait_listening() {
    local _
    for _ in $(seq 1 600); do
        grep -q '^Serving HTTP on' "$1" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

results=()
for lang in js js-fetch py rust; do
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

# The same handler, its instances reused; the handler sees the path after /reuse.
[[routes]]
prefix = "/reuse"
chain = ["app"]
reuse = $REUSE
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
    # Started once the first has compiled the handler into wasmtime's cache.
    wasmtime serve -Scli -W timeout="$DEADLINE" --max-instance-reuse-count "$REUSE" \
        --addr "$wt_reuse_addr" --env "BACKEND=$backend" \
        "$wasm" >"$work/logs/wasmtime-reuse-$lang.log" 2>&1 &
    wt_reuse_pid=$!
    if ! wait_listening "$work/logs/wasmtime-reuse-$lang.log" "$wt_reuse_pid"; then
        say "$lang: wasmtime serve --max-instance-reuse-count did not come up (logs in $work/logs)"
        exit 1
    fi
    python3 scripts/conformance.py run "$lang" "http://$lrpc_addr" "http://$wt_addr" \
        "http://$lrpc_addr/reuse" "http://$wt_reuse_addr" "$work/results-$lang.json"
    results+=("$work/results-$lang.json")
    stop "$lrpc_pid" "$wt_pid" "$wt_reuse_pid"
    lrpc_pid= wt_pid= wt_reuse_pid=
done

# Why a handler was not built, for the report; it reads the handlers' sizes itself.
rm -f "$work"/why-*.txt
for lang in "${!unavailable[@]}"; do printf '%s\n' "${unavailable[$lang]}" >"$work/why-$lang.txt"; done
mkdir -p bench-results
python3 scripts/conformance.py report bench-results "$work" "$DEADLINE" "$(wasmtime --version)" \
    "${results[@]}"
cat bench-results/CONFORMANCE.md
