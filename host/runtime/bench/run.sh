#!/usr/bin/env bash
# Load benchmark of the edge server, on loopback, bounded in time: requests per second and
# p50/p99 latency of a native Rust handler (the ceiling), the same answer from a thread off
# the reactor (the hop every plugin route makes, alone), one plugin, a three-plugin chain,
# the chain again while a slow route (long guest computations) is loaded beside it (three
# rounds of each, alternating; the loaded ratio compares their medians),
# and `wasmtime serve` running the same hello handler as a wasi:http component (it
# instantiates the component per request; our domains live across requests). Uses wrk
# (Debian) and wasmtime-cli 48 (crates.io), installed here if missing. Writes
# bench-results/edge.json and merges the edge ratios into bench-results/summary.json.
#
#   host/runtime/bench/run.sh [SECONDS_PER_CASE]
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-5}
addr=127.0.0.1:18181
wt_addr=127.0.0.1:18182
wasmtime_version=48.0.8

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
if ! wasmtime --version 2>/dev/null | grep -q "$wasmtime_version"; then
    cargo install --locked wasmtime-cli --version "$wasmtime_version"
fi
cargo build --release -q -p lrpc-runtime --example embed
cargo build --release -q --locked --manifest-path guests/Cargo.toml --target wasm32-wasip2 \
    --target-dir target/guests -p http-wasi-hello
target/release/examples/embed host/runtime/bench/edge.toml "$addr" >/dev/null 2>&1 &
server=$!
# -Scli: the Rust standard library for wasip2 imports wasi:cli (environment, exit) as well.
wasmtime serve -Scli --addr "$wt_addr" target/guests/wasm32-wasip2/release/http_wasi_hello.wasm \
    >/dev/null 2>&1 &
wt=$!
trap 'kill -TERM $server $wt 2>/dev/null || true; wait $server $wt 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
    curl -sf "http://$addr/native/up" >/dev/null 2>&1 && curl -sf "http://$wt_addr/up" >/dev/null 2>&1 && break
    sleep 0.1
done

# wrk's "Requests/sec" and its 50% / 99% latencies (in microseconds).
measure() {
    local out
    out=$(wrk -t2 -c16 -d"${secs}s" --latency -H 'authorization: Bearer letmein' "http://${2:-$addr}$1")
    local rps p50 p99
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    echo "$rps $(to_us "$p50") $(to_us "$p99")"
}
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
        if (u == "us") n = n; else if (u == "ms") n = n * 1000; else if (u == "s") n = n * 1e6;
        printf "%.1f", n }'
}

read -r native_rps native_p50 native_p99 < <(measure /native/x)
# The same answer from a thread off the reactor, as plugin routes answer: the hop alone.
read -r hop_rps hop_p50 hop_p99 < <(measure /hop/x)
read -r one_rps one_p50 one_p99 < <(measure /one/x)
read -r chain_rps chain_p50 chain_p99 < <(measure /chain/v1/x)
read -r wt_rps wt_p50 wt_p99 < <(measure /x "$wt_addr")
# The chain alone and with the slow route under load beside it, in alternating rounds: a
# p99 on this kind of machine moves by several times between runs, so the ratio compares
# the medians of three rounds each.
alone_p99s=()
loaded_p99s=()
loaded_rpss=()
loaded_p50s=()
for _ in 1 2 3; do
    read -r _ _ p99 < <(measure /chain/v1/x)
    alone_p99s+=("$p99")
    wrk -t1 -c4 -d"$((secs + 2))s" "http://$addr/slow/busy/20" >/dev/null &
    slow=$!
    sleep 1
    read -r rps p50 p99 < <(measure /chain/v1/x)
    wait $slow
    loaded_rpss+=("$rps")
    loaded_p50s+=("$p50")
    loaded_p99s+=("$p99")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
alone_p99=$(median "${alone_p99s[@]}")
loaded_rps=$(median "${loaded_rpss[@]}")
loaded_p50=$(median "${loaded_p50s[@]}")
loaded_p99=$(median "${loaded_p99s[@]}")
join() { local IFS=,; echo "$*"; }

mkdir -p bench-results
cat > bench-results/edge.json <<JSON
{
  "seconds_per_case": $secs,
  "native": {"rps": $native_rps, "p50_us": $native_p50, "p99_us": $native_p99},
  "hop": {"rps": $hop_rps, "p50_us": $hop_p50, "p99_us": $hop_p99},
  "chain1": {"rps": $one_rps, "p50_us": $one_p50, "p99_us": $one_p99},
  "chain3": {"rps": $chain_rps, "p50_us": $chain_p50, "p99_us": $chain_p99},
  "chain3_slow_beside": {"rps": $loaded_rps, "p50_us": $loaded_p50, "p99_us": $loaded_p99},
  "chain3_p99_us_rounds": {"alone": [$(join "${alone_p99s[@]}")], "slow_beside": [$(join "${loaded_p99s[@]}")]},
  "wasmtime_serve": {"rps": $wt_rps, "p50_us": $wt_p50, "p99_us": $wt_p99},
  "edge_chain3_over_wasmtime_serve_rps": $(awk -v a="$chain_rps" -v b="$wt_rps" 'BEGIN {printf "%.3f", a / b}'),
  "edge_chain3_over_native_rps": $(awk -v a="$chain_rps" -v b="$native_rps" 'BEGIN {printf "%.3f", a / b}'),
  "edge_hop_over_native_rps": $(awk -v a="$hop_rps" -v b="$native_rps" 'BEGIN {printf "%.3f", a / b}'),
  "edge_chain3_p50_over_chain1_p50": $(awk -v a="$chain_p50" -v b="$one_p50" 'BEGIN {printf "%.3f", a / b}'),
  "edge_fast_p99_loaded_over_alone": $(awk -v a="$loaded_p99" -v b="$alone_p99" 'BEGIN {printf "%.3f", a / b}')
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
