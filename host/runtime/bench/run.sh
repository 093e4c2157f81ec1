#!/usr/bin/env bash
# Load benchmark of the edge server, on loopback, bounded in time: requests per second, p50/p99
# latency and the server's processor time per request of a native Rust handler (the ceiling), the
# same handler busy for 1 µs per request (a calibration: what that much processor time costs here),
# the same answer from a thread off the reactor (the hop a route served by its worker pool makes,
# alone), one plugin, a three-plugin chain (reused, and isolated per request) and `wasmtime serve`
# running the same hello handler as a wasi:http component (it instantiates the component per
# request; our domains live across requests); the wasi:http hello handler under lrpc serve, fresh
# per request and reused, against `wasmtime serve -O pooling-allocator` fresh and reused (the peer
# at its best); all in three interleaved rounds (ratios are medians of the rounds' ratios); then the
# chain alone and while a slow route (long guest computations) is loaded beside it (three rounds of
# each, alternating; the loaded ratio compares their medians); the chain under `lrpc serve` without
# and with every trace exported over OTLP/HTTP (three alternating rounds); and the two plugin routes
# in process, without HTTP, back to back and with the caches written over between requests. Then two
# figures of the wasi:http handlers: the server's RSS growth while a client downloads a 50 MiB
# streamed response, and the time from a trap's answer to the next 200 of the largest handler that
# scripts/conformance.sh builds (instances reused); last, that Python handler's requests per second
# under both servers, instances reused. Uses wrk (Debian) and wasmtime 48 (scripts/wasmtime.sh),
# installed here if missing. Writes bench-results/edge.json and merges the edge ratios into
# bench-results/summary.json.
#
#   host/runtime/bench/run.sh [SECONDS_PER_CASE]
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-5}
addr=127.0.0.1:18181
wt_addr=127.0.0.1:18182
wt_pool_addr=127.0.0.1:18183
wt_reuse_addr=127.0.0.1:18184

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
# The peer, wasmtime 48.0.2, prebuilt (scripts/wasmtime.sh); first on PATH.
wasmtime_bin=$(scripts/wasmtime.sh)
export PATH="$(dirname "$wasmtime_bin"):$PATH"
cargo build --release -q -p lrpc-runtime --example embed
# `lrpc` itself serves the restart case's handler (below).
cargo build --release -q -p lrpc-runtime
cargo build --release -q --locked --manifest-path guests/Cargo.toml --target wasm32-wasip2 \
    --target-dir target/guests -p http-wasi-hello
target/release/examples/embed host/runtime/bench/edge.toml "$addr" >/dev/null 2>&1 &
server=$!
# -Scli: the Rust standard library for wasip2 imports wasi:cli (environment, exit) as well.
hello_wasm=target/guests/wasm32-wasip2/release/http_wasi_hello.wasm
wasmtime serve -Scli --addr "$wt_addr" "$hello_wasm" >/dev/null 2>&1 &
wt=$!
# The peer at its best: the pooling allocator, with a fresh instance per request (its default
# for a p2 handler) and with instances reused.
wasmtime serve -Scli -O pooling-allocator --addr "$wt_pool_addr" "$hello_wasm" >/dev/null 2>&1 &
wt_pool=$!
wasmtime serve -Scli -O pooling-allocator --max-instance-reuse-count 100000 \
    --addr "$wt_reuse_addr" "$hello_wasm" >/dev/null 2>&1 &
wt_reuse=$!
# The restart case's server, started later; empty until then (not 0: `kill 0` would
# signal the whole process group).
big= sink= untraced= traced=
trap 'kill -TERM $server $wt $wt_pool $wt_reuse $big 2>/dev/null || true; wait $server $wt $wt_pool $wt_reuse $big 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
    curl -sf "http://$addr/native/up" >/dev/null 2>&1 && curl -sf "http://$wt_addr/up" >/dev/null 2>&1 &&
        curl -sf "http://$wt_pool_addr/up" >/dev/null 2>&1 && curl -sf "http://$wt_reuse_addr/up" >/dev/null 2>&1 && break
    sleep 0.1
done

# wrk's "Requests/sec" and its 50% / 99% latencies (in microseconds).
# With a server's process id as $3, a fourth figure: the processor time the server spent per
# request, in microseconds (user and system time from /proc, over the run). Requests per
# second on this 2-core machine swing with what else runs on it; a server's own time per
# request swings far less, and it is what a busy host pays.
measure() {
    local out cpu0=0 cpu1=0
    [ -n "${3:-}" ] && cpu0=$(server_ticks "$3")
    out=$(wrk -t2 -c16 -d"${secs}s" --latency -H 'authorization: Bearer letmein' "http://${2:-$addr}$1")
    [ -n "${3:-}" ] && cpu1=$(server_ticks "$3")
    local rps p50 p99 n cpu=null
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    if [ -n "${3:-}" ] && [ "${n:-0}" -gt 0 ]; then
        cpu=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" -v hz="$clk_tck" 'BEGIN {printf "%.1f", (b - a) * 1e6 / hz / n}')
    fi
    echo "$rps $(to_us "$p50") $(to_us "$p99") $cpu"
}
# A process's user and system time so far, in clock ticks.
server_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
clk_tck=$(getconf CLK_TCK)
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
        if (u == "us") n = n; else if (u == "ms") n = n * 1000; else if (u == "s") n = n * 1e6;
        printf "%.1f", n }'
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
join() { local IFS=,; echo "$*"; }
div() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

# The plain cases in three rounds, each round all of them one after another, so that a slow
# spell of the machine falls on every case alike: a ratio is the median of its rounds' ratios,
# and a case's numbers are the medians of its rounds. `hop` is the native answer from a
# thread off the reactor, as a route served by its worker pool answers: the hop alone.
# `spin1us` is the native handler busy for 1 µs per request: what a microsecond of
# processor time per request costs here, where wrk shares the processors with the server.
# `wfresh` and `wreuse` are the wasi:http hello handler under lrpc serve (a fresh instance per
# request, and instances reused); `wtpool` and `wtreuse` the same under wasmtime serve with
# its pooling allocator. `chainiso` is the chain with its three plugins isolated per request
# (`isolation = "request"`): against `chain` (the same plugins reused) and `wtpool`.
cases=(native spin1us hop one chain chainiso wt wfresh wtpool wreuse wtreuse)
declare -A path=([native]=/native/x [spin1us]=/spin/1000/x [hop]=/hop/x [one]=/one/x [chain]=/chain/v1/x
    [chainiso]=/chain-iso/v1/x [wt]=/x [wfresh]=/wasi-fresh/x [wtpool]=/x [wreuse]=/wasi-reuse/x [wtreuse]=/x)
declare -A host=([native]=$addr [spin1us]=$addr [hop]=$addr [one]=$addr [chain]=$addr [chainiso]=$addr
    [wt]=$wt_addr [wfresh]=$addr [wtpool]=$wt_pool_addr [wreuse]=$addr [wtreuse]=$wt_reuse_addr)
declare -A pid=([native]=$server [spin1us]=$server [hop]=$server [one]=$server [chain]=$server
    [chainiso]=$server [wt]=$wt [wfresh]=$server [wtpool]=$wt_pool [wreuse]=$server [wtreuse]=$wt_reuse)
declare -A rps p50 p99 cpu
for _ in 1 2 3; do
    for c in "${cases[@]}"; do
        read -r r a b u < <(measure "${path[$c]}" "${host[$c]}" "${pid[$c]}")
        rps[$c]+="$r "
        p50[$c]+="$a "
        p99[$c]+="$b "
        cpu[$c]+="$u "
    done
done
# Where the plugin routes ran by the end of the plain cases (1: on the reactor's threads, 0:
# their worker pools, after their requests turned out long) and how often a reactor thread
# handed its other work over: a route off the reactor runs at about the hop's speed.
metrics=$(curl -sf "http://$addr/metrics")
route_metric() {
    echo "$metrics" | awk -v m="$1{route=\"$2\"}" '$1 == m {print $2; found = 1} END {if (!found) print "null"}'
}
routes_json() {
    echo "{\"/one\": $(route_metric "$1" /one), \"/chain\": $(route_metric "$1" /chain)}"
}

# The per-round ratio of case $1's column $3 (rps, p50 or p99) over case $2's.
ratios() {
    local -n col=$3
    local -a x y out
    read -ra x <<<"${col[$1]}"
    read -ra y <<<"${col[$2]}"
    for i in "${!x[@]}"; do out+=("$(div "${x[$i]}" "${y[$i]}")"); done
    echo "${out[@]}"
}
# A case's medians as JSON, with its rounds' requests per second.
summary() {
    # shellcheck disable=SC2086
    echo "{\"rps\": $(median ${rps[$1]}), \"p50_us\": $(median ${p50[$1]}), \"p99_us\": $(median ${p99[$1]}), \"cpu_us_per_request\": $(median ${cpu[$1]}), \"rps_rounds\": [$(join ${rps[$1]})]}"
}
# shellcheck disable=SC2046
chain_over_wt=$(median $(ratios chain wt rps))
# shellcheck disable=SC2046
chain_over_native=$(median $(ratios chain native rps))
# shellcheck disable=SC2046
hop_over_native=$(median $(ratios hop native rps))
# shellcheck disable=SC2046
spin1us_over_native=$(median $(ratios spin1us native rps))
# shellcheck disable=SC2046
chain_p50_over_one=$(median $(ratios chain one p50))
# shellcheck disable=SC2046
wasi_fresh_over_pool=$(median $(ratios wfresh wtpool rps))
# shellcheck disable=SC2046
wasi_reuse_over_reuse=$(median $(ratios wreuse wtreuse rps))
# The same pairs by the servers' processor time per request (lower is cheaper).
# shellcheck disable=SC2046
wasi_fresh_over_pool_cpu=$(median $(ratios wfresh wtpool cpu))
# shellcheck disable=SC2046
wasi_reuse_over_reuse_cpu=$(median $(ratios wreuse wtreuse cpu))
# shellcheck disable=SC2046
chainiso_over_chain=$(median $(ratios chainiso chain rps))
# shellcheck disable=SC2046
chainiso_over_pool=$(median $(ratios chainiso wtpool rps))

# The fast route's tail alone and with the slow route loaded beside it, alternating.
alone_p99s=()
loaded_p99s=()
loaded_rpss=()
loaded_p50s=()
for _ in 1 2 3; do
    read -r _ _ p99 _ < <(measure /chain/v1/x)
    alone_p99s+=("$p99")
    wrk -t1 -c4 -d"$((secs + 2))s" "http://$addr/slow/busy/20" >/dev/null &
    slow=$!
    sleep 1
    read -r r a b _ < <(measure /chain/v1/x)
    wait $slow
    loaded_rpss+=("$r")
    loaded_p50s+=("$a")
    loaded_p99s+=("$b")
done
alone_p99=$(median "${alone_p99s[@]}")
loaded_rps=$(median "${loaded_rpss[@]}")
loaded_p50=$(median "${loaded_p50s[@]}")
loaded_p99=$(median "${loaded_p99s[@]}")

# What trace export costs: the chain under `lrpc serve` without export, and with every
# trace exported (sampler `always_on`) over OTLP/HTTP to a sink on loopback that reads and
# drops the batches; three alternating rounds, the ratio the median of theirs. The queue is
# large enough that spans are exported rather than dropped for a full queue.
traced_addr=127.0.0.1:18185
untraced_addr=127.0.0.1:18186
sink_addr=127.0.0.1:18187
python3 - "$sink_addr" <<'PY' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
host, port = sys.argv[1].split(":")
http.server.ThreadingHTTPServer((host, int(port)), Sink).serve_forever()
PY
sink=$!
target/release/lrpc serve host/runtime/bench/edge.toml --listen "$untraced_addr" >/dev/null 2>&1 &
untraced=$!
OTEL_EXPORTER_OTLP_ENDPOINT="http://$sink_addr" OTEL_TRACES_SAMPLER=always_on \
    OTEL_BSP_MAX_QUEUE_SIZE=262144 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=8192 OTEL_BSP_SCHEDULE_DELAY=200 \
    target/release/lrpc serve host/runtime/bench/edge.toml --listen "$traced_addr" >/dev/null 2>&1 &
traced=$!
trap 'kill -TERM $server $wt $wt_pool $wt_reuse $big $sink $untraced $traced 2>/dev/null || true; wait $server $wt $wt_pool $wt_reuse $big $sink $untraced $traced 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    curl -sf -H 'authorization: Bearer letmein' "http://$untraced_addr/chain/v1/x" >/dev/null 2>&1 &&
        curl -sf -H 'authorization: Bearer letmein' "http://$traced_addr/chain/v1/x" >/dev/null 2>&1 && break
    sleep 0.1
done
untraced_rpss=()
traced_rpss=()
traced_ratios=()
traced_cpu_ratios=()
for _ in 1 2 3; do
    read -r u _ _ uc < <(measure /chain/v1/x "$untraced_addr" "$untraced")
    read -r t _ _ tc < <(measure /chain/v1/x "$traced_addr" "$traced")
    untraced_rpss+=("$u")
    traced_rpss+=("$t")
    traced_ratios+=("$(div "$t" "$u")")
    traced_cpu_ratios+=("$(div "$tc" "$uc")")
done
chain_traced_over_untraced=$(median "${traced_ratios[@]}")
chain_traced_over_untraced_cpu=$(median "${traced_cpu_ratios[@]}")
kill -TERM "$sink" "$untraced" "$traced" 2>/dev/null || true
wait "$sink" "$untraced" "$traced" 2>/dev/null || true
sink= untraced= traced=

# The plugin routes' own time per request in process, without HTTP (the `dispatch`
# example): back to back, and with 1 MiB written between requests, as the server's other
# work and wrk beside it push the plugins' code and memory out of the caches under load.
# Medians of three runs, in nanoseconds.
cargo build --release -q -p lrpc-runtime --example dispatch
# (A run that prints no time, or had requests not answered 200, fails the script: edge.json
# is not written with a hole in it.)
in_process() {
    local runs=() ns
    for _ in 1 2 3; do
        ns=$(target/release/examples/dispatch host/runtime/bench/edge.toml "$1" "$2" 1 "$3" |
            awk '/ns each/ && /\(0 not 200/ {for (i = 2; i <= NF; i++) if ($i == "ns") print $(i - 1)}')
        if ! [[ $ns =~ ^[0-9]+$ ]]; then
            echo "dispatch $1 (evicting $3 KiB) failed or had requests not answered 200" >&2
            return 1
        fi
        runs+=("$ns")
    done
    median "${runs[@]}"
}
in_process_json() {
    local warm cold
    warm=$(in_process "$1" 100000 0) || return 1
    cold=$(in_process "$1" 20000 1024) || return 1
    echo "{\"back_to_back\": $warm, \"evicted_1mib\": $cold}"
}
one_in_process=$(in_process_json /one/x)
chain_in_process=$(in_process_json /chain/v1/x)

# The server's RSS growth, in MiB, while a client downloads 50 MiB that the stream handler
# (route /stream) writes as fast as the client takes it: the body passes through bounded
# buffers, so the growth stays small. VmRSS is sampled every 20 ms from before the request
# to its end; the client reads at 50 MiB/s so that the download spans many samples. Three
# downloads; the largest growth counts.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
stream_rss_growth() {
    local before peak now got
    before=$(rss_kib "$server")
    peak=$before
    curl -s --limit-rate 50M -o /dev/null -w '%{http_code} %{size_download}' \
        "http://$addr/stream/gen/50" >"$tmp/stream.out" &
    local dl=$!
    while kill -0 "$dl" 2>/dev/null; do
        now=$(rss_kib "$server")
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.02
    done
    wait "$dl"
    got=$(cat "$tmp/stream.out")
    if [ "$got" != "200 52428800" ]; then
        echo "the 50 MiB stream answered \"$got\", not 200 and 52428800 bytes" >&2
        return 1
    fi
    awk -v a="$before" -v b="$peak" 'BEGIN {printf "%.1f", (b - a) / 1024}'
}
tmp=$(mktemp -d)
py_wt=
py_wtt=
trap 'kill -TERM $server $wt $wt_pool $wt_reuse $big $py_wt $py_wtt 2>/dev/null || true; wait $server $wt $wt_pool $wt_reuse $big $py_wt $py_wtt 2>/dev/null || true; rm -rf "$tmp"' EXIT
# Warm: the handler's first instances and the server's buffers exist before the first sample.
curl -sf -o /dev/null "http://$addr/stream/gen/1"
curl -sf -o /dev/null "http://$addr/stream/gen/1"
stream_rss_rounds=()
for _ in 1 2 3; do
    growth=$(stream_rss_growth) || exit 1
    stream_rss_rounds+=("$growth")
done
stream_rss_growth_mib=$(printf '%s\n' "${stream_rss_rounds[@]}" | sort -g | tail -1)

# restart_ms: from a trap's answer to the next 200 on the same route, instances reused, for
# the largest handler scripts/conformance.sh builds (JavaScript or Python, 13-21 MB): a
# handler's trap drops only its instance, so this is one instantiation, no compiling. Five
# rounds; the median counts.
restart_ms=null
restart_rounds=()
restart_handler=null
big_addr=127.0.0.1:18185
if scripts/conformance.sh build; then
    big_wasm=$(ls -S target/conformance/handler-js.wasm target/conformance/handler-py.wasm 2>/dev/null | head -1 || true)
fi
if [ -n "${big_wasm:-}" ]; then
    restart_handler="\"$(basename "$big_wasm")\""
    cat >"$tmp/restart.toml" <<TOML
[kernel]
cache-dir = "$PWD/target/conformance/cache"

[serve]
listen = "$big_addr"

[domains.big]
wasm = "$PWD/$big_wasm"
exports = [{ interface = "wasi:http/incoming-handler" }]

[domains.big.limits]
deadline = "5s"
reuse = 1000

[[routes]]
prefix = "/"
chain = ["big"]
TOML
    target/release/lrpc serve "$tmp/restart.toml" >"$tmp/restart.log" 2>&1 &
    big=$!
    # Its first start may compile the handler (tens of seconds); later ones read the cache.
    for _ in $(seq 1 600); do
        curl -sf -o /dev/null "http://$big_addr/hello" && break
        sleep 0.2
    done
    if ! curl -sf -o /dev/null "http://$big_addr/hello"; then
        echo "lrpc serve did not serve $big_wasm (log: $tmp/restart.log)" >&2
        cat "$tmp/restart.log" >&2
        exit 1
    fi
    for _ in 1 2 3 4 5; do
        ms=$(python3 - "$big_addr" <<'PY'
import http.client, sys, time
host, port = sys.argv[1].split(":")
def get(path):
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()
assert get("/trap") == 500, "the trap did not answer 500"
trapped = time.monotonic()
while get("/hello") != 200:
    time.sleep(0.002)
print(round((time.monotonic() - trapped) * 1000, 1))
PY
) || exit 1
        restart_rounds+=("$ms")
    done
    restart_ms=$(median "${restart_rounds[@]}")
    kill -TERM "$big" 2>/dev/null || true
    wait "$big" 2>/dev/null || true
    big=
else
    echo "restart_ms: no JavaScript or Python handler was built (scripts/conformance.sh build); left null" >&2
fi

# Heavy handlers: the conformance Python handler (CPython inside, 18 MB), its instances
# reused under both servers (lrpc's `reuse`; `wasmtime serve -O pooling-allocator
# --max-instance-reuse-count`), in three interleaved rounds:
# `edge_wasi_py_reuse_over_wasmtime_reuse_rps` is the median of the rounds' ratios.
# `wasmtime serve` compiles epoch checks into guest code only with `-W timeout`; without
# it a handler has no deadline. The third server is wasmtime with the same 5 s deadline as
# lrpc's: `edge_wasi_py_reuse_over_wasmtime_timeout_reuse_rps`.
py_wasm=target/conformance/handler-py.wasm
py_lrpc_addr=127.0.0.1:18186
py_wt_addr=127.0.0.1:18187
py_wtt_addr=127.0.0.1:18188
py_ratio=null
py_timeout_ratio=null
py_cpu_ratio=null
py_timeout_cpu_ratio=null
py_lrpc_rounds=()
py_wt_rounds=()
py_wtt_rounds=()
if [ -f "$py_wasm" ]; then
    cat >"$tmp/py.toml" <<TOML
[kernel]
cache-dir = "$PWD/target/conformance/cache"

[serve]
listen = "$py_lrpc_addr"

[domains.py]
wasm = "$PWD/$py_wasm"
exports = [{ interface = "wasi:http/incoming-handler" }]

[domains.py.limits]
deadline = "5s"
reuse = 100000

[[routes]]
prefix = "/"
chain = ["py"]
TOML
    target/release/lrpc serve "$tmp/py.toml" >"$tmp/py.log" 2>&1 &
    big=$!
    wasmtime serve -Scli -O pooling-allocator --max-instance-reuse-count 100000 \
        --addr "$py_wt_addr" "$py_wasm" >/dev/null 2>&1 &
    py_wt=$!
    wasmtime serve -Scli -O pooling-allocator --max-instance-reuse-count 100000 -W timeout=5s \
        --addr "$py_wtt_addr" "$py_wasm" >/dev/null 2>&1 &
    py_wtt=$!
    for _ in $(seq 1 600); do
        curl -sf -o /dev/null "http://$py_lrpc_addr/hello" && curl -sf -o /dev/null "http://$py_wt_addr/hello" \
            && curl -sf -o /dev/null "http://$py_wtt_addr/hello" && break
        sleep 0.2
    done
    py_ratios=()
    py_timeout_ratios=()
    py_cpu_ratios=()
    py_timeout_cpu_ratios=()
    for _ in 1 2 3; do
        read -r a _ _ ac < <(measure /hello "$py_lrpc_addr" "$big")
        read -r b _ _ bc < <(measure /hello "$py_wt_addr" "$py_wt")
        read -r c _ _ cc < <(measure /hello "$py_wtt_addr" "$py_wtt")
        py_lrpc_rounds+=("$a")
        py_wt_rounds+=("$b")
        py_wtt_rounds+=("$c")
        py_ratios+=("$(div "$a" "$b")")
        py_timeout_ratios+=("$(div "$a" "$c")")
        py_cpu_ratios+=("$(div "$ac" "$bc")")
        py_timeout_cpu_ratios+=("$(div "$ac" "$cc")")
    done
    py_ratio=$(median "${py_ratios[@]}")
    py_timeout_ratio=$(median "${py_timeout_ratios[@]}")
    py_cpu_ratio=$(median "${py_cpu_ratios[@]}")
    py_timeout_cpu_ratio=$(median "${py_timeout_cpu_ratios[@]}")
    kill -TERM "$big" "$py_wt" "$py_wtt" 2>/dev/null || true
    wait "$big" "$py_wt" "$py_wtt" 2>/dev/null || true
    big= py_wt= py_wtt=
else
    echo "edge_wasi_py_reuse_over_wasmtime_reuse_rps: no Python handler was built (scripts/conformance.sh build); left null" >&2
fi

mkdir -p bench-results
cat > bench-results/edge.json <<JSON
{
  "seconds_per_case": $secs,
  "native": $(summary native),
  "native_spin_1us": $(summary spin1us),
  "hop": $(summary hop),
  "chain1": $(summary one),
  "chain3": $(summary chain),
  "chain3_isolated": $(summary chainiso),
  "chain3_slow_beside": {"rps": $loaded_rps, "p50_us": $loaded_p50, "p99_us": $loaded_p99},
  "chain3_p99_us_rounds": {"alone": [$(join "${alone_p99s[@]}")], "slow_beside": [$(join "${loaded_p99s[@]}")]},
  "wasmtime_serve": $(summary wt),
  "wasi_fresh": $(summary wfresh),
  "wasmtime_serve_pooling": $(summary wtpool),
  "wasi_reuse": $(summary wreuse),
  "wasmtime_serve_pooling_reuse": $(summary wtreuse),
  "in_process_ns": {"chain1": $one_in_process, "chain3": $chain_in_process},
  "on_reactor_after_plain_cases": $(routes_json lrpc_http_route_on_reactor),
  "reactor_handoffs_after_plain_cases": $(routes_json lrpc_http_reactor_handoffs_total),
  "edge_chain3_over_wasmtime_serve_rps": $chain_over_wt,
  "edge_chain3_over_native_rps": $chain_over_native,
  "edge_chain3_traced_over_untraced_rps": $chain_traced_over_untraced,
  "chain3_traced_rps_rounds": {"untraced": [$(join "${untraced_rpss[@]}")], "traced": [$(join "${traced_rpss[@]}")]},
  "edge_hop_over_native_rps": $hop_over_native,
  "edge_native_1us_over_native_rps": $spin1us_over_native,
  "edge_chain3_p50_over_chain1_p50": $chain_p50_over_one,
  "edge_wasi_fresh_over_wasmtime_pooling_rps": $wasi_fresh_over_pool,
  "edge_wasi_reuse_over_wasmtime_reuse_rps": $wasi_reuse_over_reuse,
  "edge_wasi_fresh_over_wasmtime_pooling_cpu": $wasi_fresh_over_pool_cpu,
  "edge_wasi_reuse_over_wasmtime_reuse_cpu": $wasi_reuse_over_reuse_cpu,
  "edge_chain3_traced_over_untraced_cpu": $chain_traced_over_untraced_cpu,
  "edge_wasi_py_reuse_over_wasmtime_reuse_cpu": $py_cpu_ratio,
  "edge_wasi_py_reuse_over_wasmtime_timeout_reuse_cpu": $py_timeout_cpu_ratio,
  "edge_chain3_isolated_over_chain3_reuse_rps": $chainiso_over_chain,
  "edge_chain3_isolated_over_wasmtime_pooling_rps": $chainiso_over_pool,
  "edge_wasi_py_reuse_over_wasmtime_reuse_rps": $py_ratio,
  "edge_wasi_py_reuse_over_wasmtime_timeout_reuse_rps": $py_timeout_ratio,
  "wasi_py_reuse_rps_rounds": {"lrpc": [$(join "${py_lrpc_rounds[@]}")], "wasmtime": [$(join "${py_wt_rounds[@]}")], "wasmtime_timeout": [$(join "${py_wtt_rounds[@]}")]},
  "edge_fast_p99_loaded_over_alone": $(div "$loaded_p99" "$alone_p99"),
  "stream_rss_growth_mib": $stream_rss_growth_mib,
  "stream_rss_growth_mib_target": 8,
  "stream_rss_growth_mib_rounds": [$(join "${stream_rss_rounds[@]}")],
  "restart_ms": $restart_ms,
  "restart_ms_target": 200,
  "restart_ms_rounds": [$(join "${restart_rounds[@]}")],
  "restart_handler": $restart_handler
}
JSON
cat bench-results/edge.json

# The edge ratios into summary.json's ratios (the report bench keeps them when it runs again).
python3 - <<'PY'
import json
edge = json.load(open("bench-results/edge.json"))
keys = {k: v for k, v in edge.items() if k.startswith("edge_")}
path = "bench-results/summary.json"
try:
    summary = json.load(open(path))
except FileNotFoundError:
    summary = {"cases": {}, "ratios": {}}
summary.setdefault("ratios", {}).update(keys)
with open(path, "w") as f:
    f.write(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
print("merged", ", ".join(keys), "into", path)
PY
