#!/usr/bin/env python3
"""The conformance run's client, backend and report (see scripts/conformance.sh).

    conformance.py backend PORT
        A loopback HTTP server for the handlers' outgoing calls: GET /backend answers
        201, `x-backend: loopback` and a short body.
    conformance.py run LANG LRPC_URL WASMTIME_URL LRPC_REUSE_URL WASMTIME_REUSE_URL OUT.json
        Sends every case to both servers and writes their answers. The cases marked
        `reused` go to the REUSE URLs instead: the same handler, its instances reused (a
        route of its own with `reuse`, and a second `wasmtime serve` with
        `--max-instance-reuse-count`).
    conformance.py report OUT_DIR WORK_DIR DEADLINE WASMTIME_VERSION RESULTS.json...
        Compares the answers; writes OUT_DIR/conformance.json and OUT_DIR/CONFORMANCE.md.
        WORK_DIR holds the handlers (handler-LANG.wasm) and why one was not built
        (why-LANG.txt).

The client speaks HTTP/1.1 over a socket of its own, not through a library: it sends header
values as raw bytes, sends chunked bodies, reads the answer while the request body is still
going out (an echo streams back before the upload ends), and tells a complete body from one
cut off.
"""

import hashlib
import http.server
import json
import os
import random
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

# The handlers, in the order the report lists them: handler-LANG.wasm in the work directory.
LANGUAGES = ["js", "js-fetch", "py", "rust"]

# Headers whose values are compared, besides the status, the body and the framing.
COMPARED_HEADERS = ["content-type", "x-odd", "x-backend"]


def request(base, method, path, headers=(), body=None, chunked=False, timeout=60.0):
    """One request on a fresh connection; the answer as a dict (see `answer`)."""
    url = urlsplit(base)
    # A base with a path (a route's prefix) puts it before the path.
    path = url.path.rstrip("/") + path
    started = time.monotonic()
    try:
        conn = socket.create_connection((url.hostname, url.port), timeout=timeout)
    except OSError as e:
        return {"error": f"connect: {e}"}
    head = [
        f"{method} {path} HTTP/1.1".encode(),
        f"host: {url.hostname}:{url.port}".encode(),
        b"connection: close",
    ]
    head += [name + b": " + value for name, value in headers]
    if body is not None:
        head.append(b"transfer-encoding: chunked" if chunked else b"content-length: %d" % len(body))
    head = b"\r\n".join(head) + b"\r\n\r\n"

    def send():
        # A server may answer and close before it reads all of the body: that is not a
        # failure of the request, so errors here are ignored.
        try:
            conn.sendall(head)
            if body is None:
                return
            view = memoryview(body)
            if chunked:
                # Pieces of uneven sizes, as a streaming client sends them.
                sizes = random.Random(7)
                at = 0
                while at < len(view):
                    n = min(sizes.randint(1, 100_000), len(view) - at)
                    conn.sendall(b"%x\r\n" % n + view[at : at + n] + b"\r\n")
                    at += n
                conn.sendall(b"0\r\n\r\n")
            else:
                for at in range(0, len(view), 1 << 16):
                    conn.sendall(view[at : at + (1 << 16)])
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        return answer(conn.makefile("rb"), method, started)
    except socket.timeout:
        return {"error": "timeout", "seconds": round(time.monotonic() - started, 3)}
    except OSError as e:
        return {"error": f"read: {e}", "seconds": round(time.monotonic() - started, 3)}
    finally:
        conn.close()
        sender.join(1)


def answer(f, method, started):
    """Reads an answer: status, headers (values as Latin-1 text: one character a byte),
    framing, body length and sha256, and whether the body was complete."""
    while True:
        line = f.readline()
        if not line:
            return {"error": "closed without an answer", "seconds": round(time.monotonic() - started, 3)}
        status = int(line.split()[1])
        headers = {}
        while True:
            line = f.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        if status >= 200:
            break
    digest = hashlib.sha256()
    length = 0
    complete = True
    te = headers.get("transfer-encoding", "").lower()
    if "content-length" in headers:
        framing = "content-length"
    elif "chunked" in te:
        framing = "chunked"
    else:
        framing = "close"
    if method == "HEAD" or status in (204, 304):
        # No body follows, whatever the headers say.
        framing = "head:" + framing
    elif framing == "chunked":
        complete = False
        while True:
            size = f.readline()
            if not size:
                break
            n = int(size.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                # The last chunk, then trailers up to an empty line.
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                complete = True
                break
            piece = f.read(n)
            digest.update(piece)
            length += len(piece)
            if len(piece) < n:
                break
            f.readline()
    elif framing == "content-length":
        want = int(headers["content-length"])
        while length < want:
            piece = f.read(min(1 << 16, want - length))
            if not piece:
                break
            digest.update(piece)
            length += len(piece)
        complete = length == want
    else:
        while piece := f.read(1 << 16):
            digest.update(piece)
            length += len(piece)
    return {
        "status": status,
        "headers": {k: v for k, v in headers.items() if k in COMPARED_HEADERS},
        "framing": framing,
        "body_bytes": length,
        "sha256": digest.hexdigest(),
        "complete": complete,
        "seconds": round(time.monotonic() - started, 3),
    }


# The bodies the echo cases send: deterministic bytes, so that runs are comparable.
def payload(n):
    return random.Random(n).randbytes(n)


# Each case: name, what it sends, and the fields compared. "body" is the body's length and
# sha256; "framing" is content-length, chunked or close (prefixed `head:` for HEAD). The
# framing is compared for HEAD only: elsewhere a length and chunks carry the same body, and
# a server may choose either.
STANDARD = ["status", "body", "complete", "content-type"]
CASES = [
    ("hello_get", dict(method="GET", path="/hello"), STANDARD),
    ("hello_head", dict(method="HEAD", path="/hello"), STANDARD + ["framing"]),
    ("echo_0b", dict(method="POST", path="/echo", body=b""), STANDARD),
    ("echo_1kib", dict(method="POST", path="/echo", body=1 << 10), STANDARD),
    ("echo_1mib", dict(method="POST", path="/echo", body=1 << 20), STANDARD),
    ("echo_64mib", dict(method="POST", path="/echo", body=64 << 20), STANDARD),
    ("echo_chunked_1mib", dict(method="POST", path="/echo", body=1 << 20, chunked=True), STANDARD),
    ("header_latin1", dict(method="GET", path="/headers", headers=[(b"x-odd", b"caf\xe9")]), STANDARD + ["x-odd"]),
    ("header_high_bytes", dict(method="GET", path="/headers", headers=[(b"x-odd", b"\x80 a\tb \xfe\xff")]), STANDARD + ["x-odd"]),
    ("header_utf8", dict(method="GET", path="/headers", headers=[(b"x-odd", "café ☕".encode())]), STANDARD + ["x-odd"]),
    ("response_header_latin1", dict(method="GET", path="/latin1"), STANDARD + ["x-odd"]),
    ("stream_1mib", dict(method="GET", path="/stream/1048576"), STANDARD),
    ("stream_50mib", dict(method="GET", path="/stream/52428800"), STANDARD),
    ("not_found", dict(method="GET", path="/nowhere"), STANDARD),
    ("outgoing", dict(method="GET", path="/outgoing"), STANDARD + ["x-backend"]),
    # The servers' own error answers: their bodies are pages of their own, not compared.
    # `then` is a request sent at once after the answer (its status is `next_status`);
    # the `*_recovered` cases wait until /hello answers 200 again, and record how long.
    ("trap", dict(method="GET", path="/trap", then="/hello"), ["status", "complete", "next_status"]),
    ("trap_recovered", dict(method="GET", path="/hello", settle=True), STANDARD),
    ("spin", dict(method="GET", path="/spin", then="/hello"), ["status", "complete", "next_status"]),
    ("spin_recovered", dict(method="GET", path="/hello", settle=True), STANDARD),
    # One request after another, each on a connection of its own: `ok` counts the answers
    # that were 200 with the whole of "hello\n". The answer compared besides is the first
    # that was not, else the last.
    ("hello_x1000", dict(method="GET", path="/hello", repeat=1000, expect=b"hello\n"), STANDARD + ["ok"]),
    # The same, to the handler with its instances reused: up to 1,000 requests an instance.
    (
        "hello_x1000_reused",
        dict(method="GET", path="/hello", repeat=1000, expect=b"hello\n", reused=True),
        STANDARD + ["ok"],
    ),
]


def settle(base, limit=30.0):
    """Waits until `base` answers /hello with 200; the seconds that took."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if request(base, "GET", "/hello", timeout=10).get("status") == 200:
            break
        time.sleep(0.005)
    return round(time.monotonic() - started, 3)


def repeated(base, n, expect, **spec):
    """`n` requests one after another; the first answer that was not 200 with `expect` as
    its body (else the last), with `repeat`: how many were, and the first few that were not."""
    want = hashlib.sha256(expect).hexdigest()
    started = time.monotonic()
    ok, failed, shown = 0, [], None
    for i in range(n):
        got = request(base, **spec)
        if got.get("status") == 200 and got.get("complete") and got.get("sha256") == want:
            ok += 1
        else:
            if len(failed) < 5:
                failed.append({"request": i + 1, "status": got.get("status"), "error": got.get("error")})
            shown = shown or got
    shown = dict(shown or got)
    shown["repeat"] = {"sent": n, "ok": ok, "failed": failed, "seconds": round(time.monotonic() - started, 3)}
    return shown


def run(lang, lrpc, wasmtime, lrpc_reuse, wasmtime_reuse, out):
    results = {}
    for name, spec, fields in CASES:
        spec = dict(spec)
        wait = spec.pop("settle", False)
        then = spec.pop("then", None)
        repeat, expect = spec.pop("repeat", None), spec.pop("expect", None)
        reused = spec.pop("reused", False)
        if isinstance(spec.get("body"), int):
            spec["body"] = payload(spec["body"])
        sent = {"method": spec["method"], "path": spec["path"]}
        if spec.get("headers"):
            sent["headers"] = {n.decode(): v.decode("latin-1") for n, v in spec["headers"]}
        if spec.get("body") is not None:
            sent["body_bytes"] = len(spec["body"])
            sent["sha256"] = hashlib.sha256(spec["body"]).hexdigest()
            sent["chunked"] = spec.get("chunked", False)
        if then:
            sent["then"] = then
        if repeat:
            sent["repeat"] = repeat
        if reused:
            sent["reused"] = True
        got = {}

        waited = {}

        def one(server, base):
            if wait:
                waited[server] = settle(base)
            got[server] = repeated(base, repeat, expect, **spec) if repeat else request(base, **spec)
            if then:
                got[server]["next"] = request(base, "GET", then)

        # Both servers at once: a spin then costs one deadline, not two. They are separate
        # processes, so the answers do not depend on each other.
        threads = [
            threading.Thread(target=one, args=("lrpc", lrpc_reuse if reused else lrpc)),
            threading.Thread(target=one, args=("wasmtime", wasmtime_reuse if reused else wasmtime)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results[name] = {"sent": sent, "compared": fields, **got}
        if waited:
            results[name]["settled_after_s"] = waited
        summary = {s: (got[s].get("status"), got[s].get("error")) for s in ("lrpc", "wasmtime")}
        if repeat:
            summary = {s: (summary[s], field(got[s], "ok")) for s in summary}
        print(f"  {lang} {name}: {summary}", file=sys.stderr)
    with open(out, "w") as f:
        json.dump({"language": lang, "cases": results}, f, indent=1)


def field(result, name):
    if name == "ok":
        return f"{result['repeat']['ok']}/{result['repeat']['sent']}"
    if "error" in result:
        return {"status": result["error"]}.get(name)
    if name == "body":
        return f"{result['body_bytes']} B sha256:{result['sha256'][:16]}"
    if name == "next_status":
        return result["next"].get("status", result["next"].get("error"))
    if name in ("status", "framing", "complete"):
        return result[name]
    return result["headers"].get(name)


# Why answers differ, by case and field (`None`: any field of the case), or by case, field
# and language for a difference of one handler only. A difference with no entry here is
# reported as not explained.
EXPLAINED = {
    ("spin", "status"): "A handler past its deadline answers 504 under `lrpc serve` "
    "(documented). `wasmtime serve -W timeout` traps the instance and answers 500; without "
    "`-W timeout` it has no deadline, and the request is never answered.",
    ("trap", "complete", "js-fetch"): "On an error thrown in the handler, StarlingMonkey's "
    "fetch event answers 500 itself (`respondWithError`): it sets a response with an empty "
    "body and returns without finishing that body (no `outgoing-body.finish`, and the body "
    "is not dropped). `lrpc serve` cuts off a body the handler returned without finishing "
    "(documented: a chunked body without its last chunk). wasmtime-wasi-http 48 ends the "
    "body normally when the instance goes away with its body neither finished nor dropped "
    "(src/p2/body.rs: a finish channel closed without a message reads as the end; a drop "
    "without `finish` would abort the body).",
    ("hello_x1000_reused", None, "js-fetch"): "StarlingMonkey's fetch event, as "
    "componentize-js 0.23 builds it, answers only the first request of an instance: on the "
    "next, `respondWith` throws `InvalidStateError: FetchEvent#respondWith can't be called "
    "twice on the same event` (in the servers' logs), and the handler returns without a "
    "response. That is the failure the original issue found under `lrpc serve`; with a "
    "fresh instance per request, the default of both servers for a WASI 0.2 handler, "
    "`hello_x1000` passes. With instances reused the servers then differ: `lrpc serve` "
    "answers a handler that answered nothing with 502 and drops its instance (documented), "
    "so every other request has a fresh one and succeeds; `wasmtime serve` answers 500 "
    "(`guest never invoked response-outparam::set`) and keeps the instance, so each request "
    "after its first fails. The status, body and content-type compared are those of the "
    "first failed answer: each server's own error page.",
}


def explain(case, fname, langs=()):
    """The reason for a difference in `fname` of `case` in `langs`: by language when each of
    them has the same (an entry (case, field, language) or (case, None, language)), else by
    field, else by case."""
    own = {EXPLAINED.get((case, fname, lang)) or EXPLAINED.get((case, None, lang)) for lang in langs}
    if len(own) == 1 and None not in own:
        return own.pop()
    return EXPLAINED.get((case, fname)) or EXPLAINED.get((case, None)) or "**Not explained.**"

# What the report says besides the differences.
NOTES = [
    "",
    "## Notes",
    "",
    "- `js` exports `wasi:http/incoming-handler` itself (`guests/conformance/js`). `js-fetch`",
    "  has the same routes written for StarlingMonkey's fetch event,",
    "  `addEventListener('fetch', e => e.respondWith(...))` (`guests/conformance/js-fetch`),",
    "  which componentize-js attaches to the export. The fetch event is bound to the WASI",
    "  release componentize-js 0.23's engine was built with, 0.2.10, so `js-fetch` is built",
    "  against StarlingMonkey's own 0.2.10 WIT (`guests/conformance/js-fetch/wit`); every",
    "  other handler is built against the 0.2.12 WIT wasmtime-wasi-http 48 carries. Both",
    "  servers take a handler that imports and exports the older 0.2 release.",
    "- Every case could be written with the fetch API. Header values are ByteStrings, one",
    "  character a byte, so `/headers` and `/latin1` carry bytes that are not UTF-8 as the",
    "  other handlers do; the echo is `new Response(request.body)`, streamed; `/stream/N` is",
    "  a `ReadableStream` without a length.",
    "- `hello_x1000` sends 1,000 requests one after another, each with a fresh instance;",
    "  `hello_x1000_reused` sends them to the same handler with its instances reused",
    "  (`reuse = 1000` on lrpc's route `/reuse`; a second `wasmtime serve` with",
    "  `--max-instance-reuse-count 1000`).",
    "- A first version of the JavaScript handler left the pollables it waited on to the",
    "  garbage collector. Under `lrpc serve`, streaming 50 MiB or more made it trap with",
    "  `resource has children` when it dropped the body's stream; under `wasmtime serve` it",
    "  did not, probably because `lrpc serve` buffers less of a response body, so a writer",
    "  waits on more pollables. The handler now drops each pollable at once.",
]


def cell(fname, value):
    """A value for a Markdown table; a header value as the bytes it stands for."""
    v = json.loads(value)
    if fname in COMPARED_HEADERS and isinstance(v, str):
        v = repr(v.encode("latin-1"))
    return "`" + str(v).replace("|", "\\|") + "`"


def report(out_dir, files, meta):
    langs = {}
    for path in files:
        with open(path) as f:
            data = json.load(f)
        cases = {}
        for name, c in data["cases"].items():
            # The fields compared as CASES says now, so that a report written again from
            # earlier answers follows it.
            c["compared"] = {n: f for n, _, f in CASES}.get(name, c["compared"])
            diffs = []
            for fname in c["compared"]:
                a, b = field(c["lrpc"], fname), field(c["wasmtime"], fname)
                if a != b:
                    diffs.append({"field": fname, "lrpc": a, "wasmtime": b})
            cases[name] = {
                "sent": c["sent"],
                "compared": c["compared"],
                "lrpc": c["lrpc"],
                "wasmtime": c["wasmtime"],
                "same": not diffs,
                "differences": diffs,
            }
            if "settled_after_s" in c:
                cases[name]["settled_after_s"] = c["settled_after_s"]
            if c["sent"].get("sha256") and c["sent"]["path"] == "/echo":
                # An echo must give back what was sent, whatever the other server does.
                for server in ("lrpc", "wasmtime"):
                    cases[name][f"{server}_echo_intact"] = c[server].get("sha256") == c["sent"]["sha256"]
        same = sum(1 for c in cases.values() if c["same"])
        langs[data["language"]] = {"available": True, "same": same, "differ": len(cases) - same, "cases": cases}
    for lang, why in meta.get("unavailable", {}).items():
        langs[lang] = {"available": False, "why": why}
    doc = {
        "about": "Answers of lrpc serve and wasmtime serve to the same requests "
        "(scripts/conformance.sh). Header values are written one character per byte "
        "(Latin-1). `same` is whether every compared field agrees.",
        "wasmtime": meta.get("wasmtime"),
        "deadline": meta.get("deadline"),
        "handlers": meta.get("handlers", {}),
        "languages": langs,
    }
    with open(f"{out_dir}/conformance.json", "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")

    lines = [
        "# Conformance: `lrpc serve` and `wasmtime serve`",
        "",
        "Written by `scripts/conformance.sh`. The same handler, the same requests, two servers:",
        f"`lrpc serve` and `{meta.get('wasmtime')}` (`serve -Scli -W timeout={meta.get('deadline')}`).",
        f"The handler's deadline under `lrpc serve` is {meta.get('deadline')} too.",
        "",
        "Each case compares the status, the body (length and sha256), whether it was complete,",
        "and the headers the handler sets. Error answers (`trap`, `spin`) compare",
        "status and completeness only: each server writes its own error page. The cases are",
        "`CASES` in `scripts/conformance.py`; every answer is in `conformance.json`.",
        "",
        "| language | handler | cases | same | differ |",
        "| --- | --- | --- | --- | --- |",
    ]
    for lang, d in langs.items():
        if not d["available"]:
            lines.append(f"| {lang} | not built | — | — | — |")
            continue
        n = len(d["cases"])
        same = sum(1 for c in d["cases"].values() if c["same"])
        size = meta.get("handlers", {}).get(lang, {}).get("bytes")
        size = f"{size / 1e6:.1f} MB" if size else "?"
        lines.append(f"| {lang} | {size} | {n} | {same} | {n - same} |")
    # One row per difference, with the languages it showed in; then each case's reason.
    rows = {}
    for lang, d in langs.items():
        for name, c in d.get("cases", {}).items():
            for x in c["differences"]:
                key = (name, x["field"], json.dumps(x["lrpc"]), json.dumps(x["wasmtime"]))
                rows.setdefault(key, []).append(lang)
    lines += ["", "## Differences", ""]
    if rows:
        lines += ["| case | field | lrpc | wasmtime | languages |", "| --- | --- | --- | --- | --- |"]
        for (name, fname, a, b), where in rows.items():
            lines.append(f"| `{name}` | {fname} | {cell(fname, a)} | {cell(fname, b)} | {', '.join(where)} |")
        # Each reason once, with the differences it answers.
        reasons = {}
        for (name, fname, _, _), where in rows.items():
            whole = (name, None) in EXPLAINED or all((name, None, lang) in EXPLAINED for lang in where)
            what = f"`{name}`" if whole else f"`{name}` {fname}"
            if any(k[:1] == (name,) and len(k) == 3 for k in EXPLAINED):
                what += f" ({', '.join(where)})"
            reasons.setdefault(explain(name, fname, where), {})[what] = None
        lines += ["", "Why:", ""]
        for why, names in reasons.items():
            lines.append(f"- {', '.join(names)}: {why}")
    else:
        lines.append("None.")
    broken = [
        f"{server} ({lang} `{name}`)"
        for lang, d in langs.items()
        for name, c in d.get("cases", {}).items()
        for server in ("lrpc", "wasmtime")
        if c.get(f"{server}_echo_intact") is False
    ]
    lines += [
        "",
        "Every echo came back as sent under both servers."
        if not broken
        else "**Echoes that did not come back as sent:** " + ", ".join(broken) + ".",
    ]
    # The framing, recorded but not compared (but for HEAD).
    framed = {}
    built = [lang for lang, d in langs.items() if d["available"]]
    for lang, d in langs.items():
        for name, c in d.get("cases", {}).items():
            a, b = c["lrpc"].get("framing"), c["wasmtime"].get("framing")
            if a and b and a != b and "framing" not in c["compared"]:
                framed.setdefault(f"`{a}` where `wasmtime serve` sent `{b}`", {}).setdefault(name, []).append(lang)
    if framed:
        lines += [
            "",
            "Framing is recorded, not compared, except for `HEAD`: the same body comes with a",
            "`content-length` or in chunks, as the server chooses. `lrpc serve` sent:",
            "",
        ]
        for how, names in framed.items():
            cases = ", ".join(
                f"`{n}`" + ("" if ls == built else f" ({', '.join(ls)})") for n, ls in names.items()
            )
            lines.append(f"- {how}: {cases}.")
    lines += [
        "",
        "## Recovery",
        "",
        "Seconds from the answer after the failure (the `next_status` request) to the next 200",
        "on /hello; `lrpc serve` with a fresh instance per request (its default).",
        "",
        "| language | after a trap: lrpc | wasmtime | after a spin: lrpc | wasmtime |",
        "| --- | --- | --- | --- | --- |",
    ]
    for lang, d in langs.items():
        if not d["available"]:
            continue
        t = d["cases"]["trap_recovered"].get("settled_after_s", {})
        p = d["cases"]["spin_recovered"].get("settled_after_s", {})
        lines.append(
            f"| {lang} | {t.get('lrpc')} | {t.get('wasmtime')} | {p.get('lrpc')} | {p.get('wasmtime')} |"
        )
    for lang, d in langs.items():
        if not d["available"]:
            lines += ["", f"## {lang}: not built", "", d["why"]]
    lines += NOTES
    with open(f"{out_dir}/CONFORMANCE.md", "w") as f:
        f.write("\n".join(lines) + "\n")


class Backend(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"from the loopback backend\n" if self.path == "/backend" else b"no such path\n"
        self.send_response(201 if self.path == "/backend" else 404)
        self.send_header("content-type", "text/plain")
        self.send_header("x-backend", "loopback")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    cmd = sys.argv[1]
    if cmd == "backend":
        http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Backend).serve_forever()
    elif cmd == "run":
        run(*sys.argv[2:8])
    elif cmd == "report":
        out_dir, work, deadline, version = sys.argv[2:6]
        meta = {"deadline": deadline, "wasmtime": version, "handlers": {}, "unavailable": {}}
        for lang in LANGUAGES:
            wasm = os.path.join(work, f"handler-{lang}.wasm")
            why = os.path.join(work, f"why-{lang}.txt")
            if os.path.exists(why):
                with open(why) as f:
                    meta["unavailable"][lang] = f.read().strip()
            elif os.path.exists(wasm):
                meta["handlers"][lang] = {"bytes": os.path.getsize(wasm)}
        report(out_dir, sys.argv[6:], meta)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
