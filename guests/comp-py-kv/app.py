"""`lrpc:kv/store` in Python, made a component by componentize-py: an in-memory key-value
store with the same answers as `kv-server` and `comp-kv-server`."""

from typing import List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import store

MAX_KEY = 256
MAX_VALUE = 1 << 20

_entries: dict = {}


def _check_key(key: str) -> None:
    # The Rust servers count UTF-8 bytes.
    if not key or len(key.encode("utf-8")) > MAX_KEY:
        raise Err(store.Error_InvalidKey())


class Store(exports.Store):
    def put(self, key: str, value: bytes, kind: store.Kind) -> int:
        _check_key(key)
        if len(value) > MAX_VALUE:
            raise Err(store.Error_TooLarge(MAX_VALUE))
        old = _entries.get(key)
        version = 1 if old is None else old[2] + 1
        _entries[key] = (bytes(value), kind, version)
        return version

    def get(self, key: str) -> store.Entry:
        _check_key(key)
        found = _entries.get(key)
        if found is None:
            raise Err(store.Error_NotFound(key))
        value, kind, version = found
        return store.Entry(key, value, kind, version)

    def delete(self, key: str) -> bool:
        return _entries.pop(key, None) is not None

    def keys(self, prefix: Optional[str]) -> List[str]:
        prefix = prefix or ""
        # Sorted by UTF-8 bytes, like the Rust servers' BTreeMap.
        return sorted((k for k in _entries if k.startswith(prefix)), key=lambda k: k.encode("utf-8"))

    def stats(self) -> Tuple[int, int]:
        return (len(_entries), sum(len(v) for v, _, _ in _entries.values()))

    def rights(self) -> store.Access:
        return store.Access.READ | store.Access.WRITE | store.Access.SCAN

    def measure(self, c: str, delta: int, scale: float) -> Tuple[str, int, float]:
        # The next Unicode scalar value (stepping over the surrogates), or `c` at the end.
        code = ord(c)
        if code == 0xD7FF:
            nxt = "\ue000"
        elif code == 0x10FFFF:
            nxt = c
        else:
            nxt = chr(code + 1)
        wrapped = (delta * 2 + (1 << 63)) % (1 << 64) - (1 << 63)
        return (nxt, wrapped, scale * 0.5)
