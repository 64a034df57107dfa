"""Content-addressed cache of model calls: a re-run or a resume never pays for the same call twice.

Keys are sha256 hashes of canonical JSON of everything that determines the answer (model
fingerprint, prompt, parameters). Values are JSON. SQLite gives atomic, process-safe writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    """$PRBENCH_CACHE_DIR, else ~/.cache/prbench (XDG_CACHE_HOME respected)."""
    env = os.environ.get("PRBENCH_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "prbench"


def content_key(*parts: Any) -> str:
    """Stable hash of any JSON-serialisable parts (dict key order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Cache:
    """A persistent key -> JSON value store (one SQLite file), safe across threads and processes."""

    def __init__(self, path: str | Path | None = None, namespace: str = "calls"):
        self.path = Path(path) if path else default_cache_dir() / "cache.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self._local = threading.local()
        with self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS kv (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k))")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Any | None:
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, Any] = {}
        conn = self._conn()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = f"SELECT k, v FROM kv WHERE ns = ? AND k IN ({','.join('?' * len(chunk))})"
            for k, v in conn.execute(q, [self.namespace, *chunk]):
                out[k] = json.loads(v)
        return out

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any]) -> None:
        if not items:
            return
        with self._conn() as c:
            c.executemany(
                "INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)",
                [(self.namespace, k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()],
            )

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM kv WHERE ns = ?", [self.namespace]).fetchone()[0]


class NullCache(Cache):
    """A cache that remembers nothing (for --no-cache)."""

    def __init__(self) -> None:
        self.namespace = "null"

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        return {}

    def put_many(self, items: Mapping[str, Any]) -> None:
        return None

    def __len__(self) -> int:
        return 0
