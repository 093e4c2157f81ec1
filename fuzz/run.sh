#!/usr/bin/env bash
# Builds every fuzz target once and runs each for SECONDS (default 60) on its committed seed
# corpus (fuzz/corpus/<target>/, read only); new inputs go to fuzz/work/<target>/ and crashes
# to fuzz/artifacts/<target>/ (both ignored by git). Exits non-zero if any target crashed.
#
# Works on the stable toolchain: without a sanitizer cargo-fuzz passes only stable flags, and
# RUSTC_BOOTSTRAP=1 lets stable accept its unstable options (e.g. -Zsanitizer) too.
set -euo pipefail
secs="${1:-60}"
cd "$(dirname "$0")"

if ! cargo fuzz --version 2>/dev/null | grep -q "0.13.2"; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
rustup target add wasm32-unknown-unknown

export RUSTC_BOOTSTRAP=1
# No sanitizer: the targets check memory safety themselves (guard pages and patterns around
# what guests may touch), the host code under test is safe Rust apart from the kernel's two
# fenced modules, and an ASan build of wasmtime and cranelift would double the build. 16
# codegen units keep the one build of all targets affordable on a 2-core machine.
flags=(--sanitizer none --codegen-units 16)
cargo fuzz build "${flags[@]}"

targets=(presentation wit_plan entry_decode roundtrip kernel_ops remote_wire edge_request config_parse reset_ops)
failed=()
for t in "${targets[@]}"; do
    mkdir -p "work/$t" "corpus/$t"
    echo "=== $t: ${secs}s"
    if ! cargo fuzz run "${flags[@]}" "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1; then
        failed+=("$t")
    fi
done
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz targets that crashed: ${failed[*]} (reproducers in fuzz/artifacts/)"
    exit 1
fi
echo "every fuzz target ran ${secs}s without a crash"
