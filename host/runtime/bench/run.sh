#!/usr/bin/env bash
# Load benchmark of the edge server, on loopback, bounded in time: requests per second and
# p50/p99 latency of a native Rust handler (the ceiling), one plugin, a three-plugin chain,
# and the chain again while a slow route (20 ms of guest work per request) is loaded beside
# it. Uses wrk (Debian), installed here if missing. Writes bench-results/edge.json.
#
#   host/runtime/bench/run.sh [SECONDS_PER_CASE]
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-5}
addr=127.0.0.1:18181

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
cargo build --release -q -p lrpc-runtime --example embed
target/release/examples/embed host/runtime/bench/edge.toml "$addr" >/dev/null 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
    curl -sf "http://$addr/native/up" >/dev/null 2>&1 && break
    sleep 0.1
done

# wrk's "Requests/sec" and its 50% / 99% latencies (in microseconds).
measure() {
    local out
    out=$(wrk -t2 -c16 -d"${secs}s" --latency -H 'authorization: Bearer letmein' "http://$addr$1")
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
read -r one_rps one_p50 one_p99 < <(measure /one/x)
read -r chain_rps chain_p50 chain_p99 < <(measure /chain/v1/x)
# The chain again, with the slow route under load beside it.
wrk -t1 -c4 -d"$((secs + 2))s" "http://$addr/slow/busy/20" >/dev/null &
slow=$!
sleep 1
read -r loaded_rps loaded_p50 loaded_p99 < <(measure /chain/v1/x)
wait $slow

mkdir -p bench-results
cat > bench-results/edge.json <<JSON
{
  "seconds_per_case": $secs,
  "native": {"rps": $native_rps, "p50_us": $native_p50, "p99_us": $native_p99},
  "chain1": {"rps": $one_rps, "p50_us": $one_p50, "p99_us": $one_p99},
  "chain3": {"rps": $chain_rps, "p50_us": $chain_p50, "p99_us": $chain_p99},
  "chain3_slow_beside": {"rps": $loaded_rps, "p50_us": $loaded_p50, "p99_us": $loaded_p99},
  "edge_chain3_over_native_rps": $(awk -v a="$chain_rps" -v b="$native_rps" 'BEGIN {printf "%.3f", a / b}'),
  "edge_chain3_p50_over_chain1_p50": $(awk -v a="$chain_p50" -v b="$one_p50" 'BEGIN {printf "%.3f", a / b}'),
  "edge_fast_p99_loaded_over_alone": $(awk -v a="$loaded_p99" -v b="$chain_p99" 'BEGIN {printf "%.3f", a / b}')
}
JSON
cat bench-results/edge.json
