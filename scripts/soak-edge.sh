#!/usr/bin/env bash
# Soak of the edge server (`lrpc serve`), on loopback, bounded in time: SECONDS (600 by
# default) of mixed traffic against scripts/soak-edge.toml, all at once:
#
#   - wrk on the good routes /hello, /api (auth → rewrite → hello) and /file (reloaded);
#   - 8 MiB POSTs to /upload, echoed back, and now and then a 10 MiB one (413);
#   - /faulty/trap (502), /faulty/spin (504 at its 200 ms deadline), /faulty/ok and
#     /faulty/busy/20, and /hungry/fill/256 (fills 256 MiB, then traps: 502);
#   - slow clients: a head sent byte by byte (slowly enough to finish, and too slowly),
#     half a head then nothing, a body that stalls, an idle connection, a slow reader;
#   - a reload every 10 s: a new /file plugin binary, or POST /admin/reload/<domain>.
#
# It reports requests answered per route and status, errors by cause, the server's RSS
# after the warm-up, at the end and its maximum, and its metrics; then PASS or FAIL on:
#   1. the good routes (deadlines of at least 1 s, no plugin shared with the others)
#      answer every request 2xx;
#   2. RSS at the end is at most 10% above RSS after the warm-up (both measured under
#      traffic, with no 256 MiB fill or large body in flight).
# It exits 1 on FAIL. Uses wrk (Debian, installed here if missing) and python3. Its files
# (logs, the server's log, the copy of the plugin it reloads) are in target/soak-edge/.
#
#   scripts/soak-edge.sh [SECONDS]
#
# SOAK_WRK_CONNECTIONS (4 per good route) and SOAK_WRK_DELAY_MS (4: each connection's
# pause between requests) set the load; it is sustained mixed traffic, not peak throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-600}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 30 ]; then
    echo "usage: scripts/soak-edge.sh [SECONDS], at least 30" >&2
    exit 2
fi
warmup=30
[ "$secs" -ge 90 ] || warmup=$((secs / 3))
conns=${SOAK_WRK_CONNECTIONS:-4}
delay_ms=${SOAK_WRK_DELAY_MS:-4}
dir=$root/target/soak-edge

if ! command -v wrk >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y wrk >/dev/null; else sudo apt-get install -y wrk >/dev/null; fi
fi
command -v python3 >/dev/null || { echo "python3 is needed for the slow clients" >&2; exit 2; }
command -v flock >/dev/null || { echo "flock (util-linux) is needed" >&2; exit 2; }
# The build script of the test guests asks for componentize-py only with the tests' feature;
# point at the project's copy anyway, as scripts/test.sh does.
if [ -x target/tools/venv/bin/componentize-py ]; then
    export COMPONENTIZE_PY=$root/target/tools/venv/bin/componentize-py
    export PATH=$root/target/tools/venv/bin:$PATH
fi
cargo build --release -q -p lrpc-runtime --bin lrpc

rm -rf "$dir"
mkdir -p "$dir"
# The plugin /file serves, from a file this script rewrites; the build above made it.
hello_wasm=target/guests/wasm32-unknown-unknown/release/http_hello.wasm
cp "$hello_wasm" "$dir/hello-orig.wasm"
cp "$hello_wasm" "$dir/hello-file.wasm"
head -c $((8 << 20)) /dev/urandom >"$dir/body-8m"
head -c $((10 << 20)) /dev/urandom >"$dir/body-10m"
touch "$dir/heavy.lock"

LRPC_SOAK_ADMIN_TOKEN="soak-$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
export LRPC_SOAK_ADMIN_TOKEN
target/release/lrpc serve scripts/soak-edge.toml --listen 127.0.0.1:0 \
    >"$dir/server.out" 2>"$dir/server.log" &
server=$!
jobs_=()
cleanup() {
    local p
    for p in "${jobs_[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null || true
        kill -TERM "$p" 2>/dev/null || true
    done
    if kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$server" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

addr=
for _ in $(seq 1 300); do
    addr=$(sed -n 's|^listening on http://||p' "$dir/server.out" | head -1)
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || { echo "lrpc serve exited:" >&2; cat "$dir/server.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { echo "lrpc serve did not say where it listens" >&2; exit 1; }
base=http://$addr
for path in /hello/up /api/v1/up /file/up /upload/up /faulty/ok /hungry/ok /slow/up; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'authorization: Bearer letmein' "$base$path")
    [ "$code" = 200 ] || { echo "GET $path answered $code before the soak began" >&2; exit 1; }
done

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server/status" 2>/dev/null || echo 0; }
now() { date +%s; }
start=$(now)
end=$((start + secs))
echo "lrpc serve (pid $server) on $addr; soak of ${secs}s, warm-up ${warmup}s, logs in $dir"

# --- The good routes, with wrk: statuses counted by a Lua script, each connection pausing
# SOAK_WRK_DELAY_MS between requests.
cat >"$dir/count.lua" <<'LUA'
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
    statuses = {}
    first_bad = ""
    pause = tonumber(os.getenv("SOAK_WRK_DELAY_MS") or "0")
end
function delay() return pause end
function response(status, headers, body)
    statuses[status] = (statuses[status] or 0) + 1
    if (status < 200 or status > 299) and first_bad == "" then
        first_bad = status .. " " .. string.sub(body or "", 1, 200)
    end
end
function done(summary, latency, requests)
    local total, bad = {}, ""
    for _, t in ipairs(threads) do
        for k, v in pairs(t:get("statuses")) do total[k] = (total[k] or 0) + v end
        if bad == "" then bad = t:get("first_bad") end
    end
    for k, v in pairs(total) do io.write(string.format("status %d %d\n", k, v)) end
    local e = summary.errors
    io.write(string.format("requests %d\n", summary.requests))
    io.write(string.format("sockerr connect=%d read=%d write=%d timeout=%d\n",
        e.connect, e.read, e.write, e.timeout))
    io.write(string.format("latency_ms p50=%.2f p99=%.2f max=%.2f\n", latency:percentile(50) / 1000,
        latency:percentile(99) / 1000, latency.max / 1000))
    if bad ~= "" then io.write("first_bad " .. string.gsub(bad, "\n", " ") .. "\n") end
end
LUA
export SOAK_WRK_DELAY_MS=$delay_ms
declare -A wrk_path=([hello]=/hello/x [api]=/api/v1/x [file]=/file/x)
for r in hello api file; do
    wrk -t1 -c"$conns" -d"${secs}s" --timeout 5s -s "$dir/count.lua" \
        -H 'authorization: Bearer letmein' "$base${wrk_path[$r]}" >"$dir/wrk-$r.out" 2>&1 &
    jobs_+=($!)
done

# One request with curl, logged as "ROUTE EXPECTED CODE BYTES SECONDS" to log $1.
req() {
    local log=$1 route=$2 expect=$3
    shift 3
    local out
    out=$(curl -s -o /dev/null --max-time 20 -w '%{http_code} %{size_download} %{time_total}' "$@" || true)
    echo "$route $expect ${out:-000 0 0}" >>"$log"
}

# --- The faulty route: traps, spins past its deadline, and requests that should pass. A
# plugin that failed restarts with backoff (up to 5 s); requests that wait for it longer
# than its deadline get 503, so 503 is expected here as well.
(
    i=0
    while [ "$(now)" -lt "$end" ]; do
        case $((i % 4)) in
            0) req "$dir/faulty.log" /faulty/trap 502/503 "$base/faulty/trap" ;;
            1) req "$dir/faulty.log" /faulty/ok 200/503 "$base/faulty/ok" ;;
            2) req "$dir/faulty.log" /faulty/spin 504/503 "$base/faulty/spin" ;;
            3) req "$dir/faulty.log" /faulty/busy/20 200/503 "$base/faulty/busy/20" ;;
        esac
        i=$((i + 1))
        sleep 0.25
    done
) &
jobs_+=($!)

# --- The memory-hungry route: 256 MiB filled, then a trap; then a request that should pass.
# The lock keeps the RSS samples of the criterion off a fill in flight.
(
    while [ "$(now)" -lt "$end" ]; do
        flock "$dir/heavy.lock" bash -c "$(declare -f req); req '$dir/hungry.log' /hungry/fill/256 502/503 '$base/hungry/fill/256'"
        req "$dir/hungry.log" /hungry/ok 200/503 "$base/hungry/ok"
        sleep 2
    done
) &
jobs_+=($!)

# --- Large bodies: 8 MiB echoed back (the answer must hold all of it), every tenth time
# 10 MiB, over the route's max-body (413).
(
    i=0
    while [ "$(now)" -lt "$end" ]; do
        if [ $((i % 10)) -eq 9 ]; then
            flock "$dir/heavy.lock" bash -c "$(declare -f req); req '$dir/upload.log' /upload/10MiB 413 -H 'content-type: application/octet-stream' --data-binary @'$dir/body-10m' '$base/upload/big'"
        else
            flock "$dir/heavy.lock" bash -c "$(declare -f req); req '$dir/upload.log' /upload/8MiB 200 -H 'content-type: application/octet-stream' --data-binary @'$dir/body-8m' '$base/upload/big'"
        fi
        i=$((i + 1))
        sleep 0.5
    done
) &
jobs_+=($!)

# --- Slow clients, one thread per kind, each starting a new connection until the end.
cat >"$dir/slow.py" <<'PY'
import socket, sys, threading, time

host, port = sys.argv[1].rsplit(":", 1)
port = int(port)
end = float(sys.argv[2])
log = open(sys.argv[3], "a", buffering=1)
lock = threading.Lock()


def status_of(s):
    """The status of the answer, "closed" if the server closed without one, "held" if it
    neither answered nor closed within 30 s."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return "closed" if not data else "partial"
            data += chunk
    except socket.timeout:
        return "held"
    except ConnectionResetError:
        return "reset"
    return data.split(b" ", 2)[1].decode()


def read_all(s, rate):
    """Reads a whole answer at `rate` bytes per second: its status and body length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return "closed", 0
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
    got = len(body)
    while got < length:
        chunk = s.recv(min(16384, length - got))
        if not chunk:
            break
        got += len(chunk)
        time.sleep(len(chunk) / rate)
    return head.split(b" ", 2)[1].decode(), got


def attempt(kind):
    s = socket.create_connection((host, port), timeout=30)
    t0 = time.monotonic()
    try:
        if kind == "trickle-ok":  # a 3 s head: within the 10 s header-timeout, answered 200
            req = b"GET /hello/trickle HTTP/1.1\r\nHost: soak\r\nUser-Agent: soak-slow\r\nConnection: close\r\n\r\n"
            for b in req:
                s.sendall(bytes([b]))
                time.sleep(3.0 / len(req))
            out = status_of(s)
        elif kind == "trickle-stall":  # a byte a second: never a whole head within 10 s
            req = b"GET /slow/trickle HTTP/1.1\r\nHost: soak\r\nUser-Agent: soak-slow\r\n\r\n"
            out = "held"
            for b in req:
                try:
                    s.sendall(bytes([b]))
                except OSError:
                    out = "closed"
                    break
                s.settimeout(1.0)
                try:
                    d = s.recv(4096)
                    out = d.split(b" ", 2)[1].decode() if d else "closed"
                    break
                except socket.timeout:
                    pass
                if time.monotonic() - t0 > 30:
                    break
        elif kind == "half-head":  # half a head, then nothing
            s.sendall(b"GET /slow/half HTTP/1.1\r\nHost: soak\r\n")
            out = status_of(s)
        elif kind == "stalled-body":  # 1000 of 100000 bytes of body, then nothing
            s.sendall(b"POST /slow/body HTTP/1.1\r\nHost: soak\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            out = status_of(s)
        elif kind == "idle":  # a connection that sends nothing
            out = status_of(s)
        elif kind == "slow-reader":  # 1 MiB echoed back, read at 256 KiB/s
            body = b"y" * (1 << 20)
            s.sendall(b"POST /slow/read HTTP/1.1\r\nHost: soak\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            status, got = read_all(s, 256 << 10)
            out = status if got >= len(body) else f"short-{got}"
    except OSError as e:
        out = "error-" + type(e).__name__
    finally:
        s.close()
    with lock:
        log.write(f"{kind} {out} {time.monotonic() - t0:.2f}\n")


# How long an attempt of each kind may take: none starts that could outlast the soak.
LONGEST = {"trickle-ok": 5, "trickle-stall": 31, "half-head": 31, "stalled-body": 31, "idle": 31, "slow-reader": 10}


def run(kind):
    while time.time() + LONGEST[kind] < end:
        attempt(kind)
        time.sleep(0.5)


threads = [threading.Thread(target=run, args=(k,)) for k in LONGEST]
for t in threads:
    t.start()
for t in threads:
    t.join()
PY
python3 "$dir/slow.py" "$addr" "$end" "$dir/slow.log" &
jobs_+=($!)

# --- Reloads, every 10 s: a new binary of /file's plugin (the same code, a custom section
# with a counter appended), then the admin endpoint on filehello, then on hello.
(
    i=0
    while [ $(($(now) + 10)) -lt "$end" ]; do
        sleep 10
        case $((i % 3)) in
            0)
                { cat "$dir/hello-orig.wasm"; printf '\x00\x0d\x04soak%08d' "$i"; } >"$dir/hello-file.wasm.new"
                mv "$dir/hello-file.wasm.new" "$dir/hello-file.wasm"
                echo "file filehello" >>"$dir/reload.log"
                ;;
            1 | 2)
                d=filehello
                [ $((i % 3)) -eq 2 ] && d=hello
                code=$(curl -s -o /dev/null --max-time 20 -w '%{http_code}' -X POST \
                    -H "authorization: Bearer $LRPC_SOAK_ADMIN_TOKEN" "$base/admin/reload/$d" || true)
                echo "admin $d $code" >>"$dir/reload.log"
                ;;
        esac
        i=$((i + 1))
    done
) &
jobs_+=($!)

# --- The server's RSS, threads and open files every second.
(
    while [ "$(now)" -le "$end" ] && kill -0 "$server" 2>/dev/null; do
        echo "$(($(now) - start)) $(rss_kb) $(awk '/^Threads:/ {print $2}' "/proc/$server/status") $(ls "/proc/$server/fd" | wc -l)" >>"$dir/rss.log"
        sleep 1
    done
) &
jobs_+=($!)

# RSS for the criterion: after the warm-up and 5 s before the end, with traffic running but
# no 256 MiB fill or large body in flight.
sample() { flock "$dir/heavy.lock" awk '/^VmRSS:/ {print $2}' "/proc/$server/status"; }
sleep_until() { local d=$(($1 - $(now))); [ "$d" -le 0 ] || sleep "$d"; }
sleep_until $((start + warmup))
rss_warm=$(sample)
echo "RSS after the warm-up: $((rss_warm / 1024)) MiB"
sleep_until $((end - 5))
rss_end=$(sample)
echo "RSS 5 s before the end: $((rss_end / 1024)) MiB"

for p in "${jobs_[@]}"; do wait "$p" || true; done
jobs_=()
over=$(($(now) - end))
sleep 2
rss_idle=$(rss_kb)
metrics=$(curl -s --max-time 10 "$base/metrics" || true)
echo "$metrics" >"$dir/metrics.txt"
server_alive=yes
kill -0 "$server" 2>/dev/null || server_alive=no

# ----------------------------------------------------------------------------- the report
fail=0
echo
echo "=== edge soak: ${secs}s of mixed traffic on $addr (loops ended ${over}s after the deadline) ==="
echo
echo "--- good routes (wrk -t1 -c$conns, ${delay_ms} ms pause per connection) ---"
good_total=0 good_bad=0
for r in hello api file; do
    f=$dir/wrk-$r.out
    total=$(awk '$1 == "requests" {print $2}' "$f")
    ok=$(awk '$1 == "status" && $2 >= 200 && $2 < 300 {s += $3} END {print s + 0}' "$f")
    other=$(awk '$1 == "status" && ($2 < 200 || $2 >= 300) {printf "%s%s: %s", sep, $2, $3; sep = ", "}' "$f")
    sock=$(awk '$1 == "sockerr" {print $2, $3, $4, $5}' "$f")
    errs=$(awk '$1 == "sockerr" {n = 0; for (i = 2; i <= 5; i++) {split($i, kv, "="); n += kv[2]} print n}' "$f")
    lat=$(awk '$1 == "latency_ms" {print $2, $3, $4}' "$f")
    if [ -z "$total" ]; then
        echo "${wrk_path[$r]}: wrk printed no summary:"
        sed 's/^/    /' "$f"
        fail=1
        continue
    fi
    printf '%-12s %8d requests, %8d 2xx, non-2xx: %s; socket errors: %s; latency ms %s\n' \
        "${wrk_path[$r]}" "$total" "$ok" "${other:-none}" "$sock" "$lat"
    grep '^first_bad' "$f" | sed 's/^/    /' || true
    good_total=$((good_total + total))
    good_bad=$((good_bad + total - ok + errs))
done

# Logs of "ROUTE EXPECTED CODE BYTES SECONDS": per route, counts by code, and how many were
# none of the expected codes (EXPECTED is one code, or several joined by "/").
tally() {
    awk '{n[$1]++; c[$1 " " $3]++; if (index("/" $2 "/", "/" $3 "/") == 0) bad[$1]++; t[$1] += $5; if ($5 > m[$1]) m[$1] = $5; e[$1] = $2}
         END {for (r in n) {s = ""; for (k in c) {split(k, p, " "); if (p[1] == r) s = s " " p[2] "x" c[k]}
              printf "%-16s %6d requests, expected %s, got:%s; unexpected %d; mean %.3fs, max %.3fs\n",
                     r, n[r], e[r], s, bad[r] + 0, t[r] / n[r], m[r]}}' "$@" | sort
}
echo
echo "--- large bodies (POST, echoed back) ---"
tally "$dir/upload.log"
up_bad=$(awk '$1 == "/upload/8MiB" && ($3 != 200 || $4 < 8388608) {n++} END {print n + 0}' "$dir/upload.log")
up_total=$(awk '$1 == "/upload/8MiB" {n++} END {print n + 0}' "$dir/upload.log")
short=$(awk '$1 == "/upload/8MiB" && $3 == 200 && $4 < 8388608 {n++} END {print n + 0}' "$dir/upload.log")
[ "$short" -eq 0 ] || echo "    $short answers 200 did not echo the whole 8 MiB body"
awk '$1 == "/upload/10MiB" && $3 != 413 {print "    10 MiB body answered " $3}' "$dir/upload.log" | sort | uniq -c

echo
echo "--- faulty and memory-hungry routes (502 trap, 504 deadline, 503 waited for a restart) ---"
tally "$dir/faulty.log" "$dir/hungry.log"

echo
echo "--- slow clients (kind, outcome: count, max seconds to outcome) ---"
awk '{k = $1 " " $2; n[k]++; if ($3 > m[k]) m[k] = $3} END {for (k in n) printf "%-28s %5d  max %.1fs\n", k, n[k], m[k]}' \
    "$dir/slow.log" | sort
trickle_total=$(awk '$1 == "trickle-ok" {n++} END {print n + 0}' "$dir/slow.log")
trickle_bad=$(awk '$1 == "trickle-ok" && $2 != 200 {n++} END {print n + 0}' "$dir/slow.log")
held=$(awk '$2 == "held" {n++} END {print n + 0}' "$dir/slow.log")
[ "$held" -eq 0 ] || echo "    $held slow connections were neither answered nor closed within 30 s"

echo
echo "--- reloads ---"
awk '{k = $1 " " $2 ($3 == "" ? "" : " " $3); n[k]++} END {for (k in n) printf "%-28s %5d\n", k, n[k]}' \
    "$dir/reload.log" 2>/dev/null | sort

metric() { echo "$metrics" | awk -v m="$1" 'index($1, m) == 1 {s += $2} END {print s + 0}'; }
echo
echo "--- the server's metrics at the end ---"
echo "requests by route and code (lrpc_http_requests_total):"
echo "$metrics" | awk '$1 ~ /^lrpc_http_requests_total\{/ {print "    " $1, $2}' | sort
echo "plugin failures (lrpc_plugin_failures_total):"
echo "$metrics" | awk '$1 ~ /^lrpc_plugin_failures_total\{/ && $2 > 0 {print "    " $1, $2}' | sort
echo "restarts and reloads:"
echo "$metrics" | awk '$1 ~ /^lrpc_domain_(restarts|reloads)_total\{/ && $2 > 0 {print "    " $1, $2}' | sort
echo "linear memory (lrpc_domain_memory_bytes, MiB):"
echo "$metrics" | awk '$1 ~ /^lrpc_domain_memory_bytes\{/ {printf "    %s %.1f\n", $1, $2 / 1048576}' | sort
# Server-side check of the good routes: nothing but 2xx, and /upload nothing but 2xx and
# the 413s of the 10 MiB bodies.
server_bad=$(echo "$metrics" | awk '$1 ~ /^lrpc_http_requests_total\{/ && $1 ~ /route="\/(hello|api|file)"/ && $1 !~ /code="2/ {s += $2} END {print s + 0}')
sent_413=$(awk '$1 == "/upload/10MiB" {n++} END {print n + 0}' "$dir/upload.log")
server_upload_bad=$(echo "$metrics" | awk '$1 ~ /^lrpc_http_requests_total\{/ && $1 ~ /route="\/upload"/ && $1 !~ /code="2/ && $1 !~ /code="413"/ {s += $2} END {print s + 0}')
[ -n "$metrics" ] || { echo "    /metrics did not answer"; server_bad=unknown; }

echo
echo "--- the server process ---"
awk 'NR == 1 {f = $0} {l = $0; if ($2 > m) m = $2} END {split(f, a, " "); split(l, b, " ");
     printf "threads %d -> %d, open files %d -> %d (first sample -> last)\n", a[3], b[3], a[4], b[4]}' "$dir/rss.log"
rss_max=$(awk '$2 > m {m = $2; t = $1} END {print m, t}' "$dir/rss.log")
printf 'RSS after warm-up (%ss): %d MiB; 5 s before the end: %d MiB; max: %d MiB (at %ss); idle after the traffic: %d MiB\n' \
    "$warmup" $((rss_warm / 1024)) $((rss_end / 1024)) $((${rss_max% *} / 1024)) "${rss_max#* }" $((rss_idle / 1024))
echo "RSS by minute, MiB (lowest-highest; the highs include 256 MiB fills in flight):
$(awk '{m = int($1 / 60); r = int($2 / 1024); if (!(m in lo) || r < lo[m]) lo[m] = r; if (r > hi[m]) hi[m] = r}
       END {for (i = 0; i in lo; i++) printf "%s%d: %d-%d", (i ? ", " : "    "), i, lo[i], hi[i]; print ""}' "$dir/rss.log")
log lines: $(grep -c . "$dir/server.log" || true) (WARN: $(grep -c 'WARN' "$dir/server.log" || true), ERROR: $(grep -c 'ERROR' "$dir/server.log" || true)); server alive at the end: $server_alive"

echo
echo "=== criteria ==="
good_all=$((good_total + up_total + trickle_total))
good_not=$((good_bad + up_bad + trickle_bad))
if [ "$good_not" -eq 0 ] && [ "$server_bad" = 0 ] && [ "$server_upload_bad" -eq 0 ] && [ "$good_total" -gt 0 ]; then
    echo "PASS  good routes: $good_all requests, all answered 2xx (server-side: no other code)"
else
    echo "FAIL  good routes: $good_not of $good_all requests not answered 2xx or not answered;" \
        "server-side non-2xx on /hello, /api, /file: $server_bad; on /upload besides 413: $server_upload_bad"
    grep -E 'hello|auth|rewrite|filehello|"body"|plugin=body' "$dir/server.log" | grep -E 'WARN|ERROR' | head -20 | sed 's/^/    /' || true
    fail=1
fi
growth=$(awk -v a="$rss_warm" -v b="$rss_end" 'BEGIN {printf "%+.1f", (b - a) * 100 / a}')
if [ "$rss_end" -le $((rss_warm * 110 / 100)) ]; then
    echo "PASS  RSS: $((rss_warm / 1024)) MiB after warm-up, $((rss_end / 1024)) MiB at the end ($growth%, at most +10%)"
else
    echo "FAIL  RSS: $((rss_warm / 1024)) MiB after warm-up, $((rss_end / 1024)) MiB at the end ($growth%, more than +10%)"
    fail=1
fi
if [ "$server_alive" = no ]; then
    echo "FAIL  the server exited during the soak:"
    tail -20 "$dir/server.log" | sed 's/^/    /'
    fail=1
fi
exit "$fail"
