"""Content-addressed cache of model calls: a re-run or a resume never pays for the same call twice.

Keys are sha256 hashes of canonical JSON of everything that determines the answer (model
fingerprint, prompt, parameters). Values are JSON. SQLite gives atomic, process-safe writes.

The file is opened on first use (a finished run never touches it). Every SQLite problem (full
disk, read-only file or folder, truncated or garbage file) becomes a `CacheError`: one line
naming the cache file and the fix; `--no-cache` (a `NullCache`) runs without one.
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

from prbench.errors import CacheError


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


_FIXES = (  # (words in SQLite's message, what it means, the fix)
    (("full",), "the disk is full", "free disk space"),
    (("readonly", "read-only", "unable to open", "permission", "access"), "it cannot be written",
     "make it (and its folder) writable"),
    (("not a database", "malformed", "corrupt", "disk i/o", "file is encrypted"), "it is damaged",
     "delete it (it holds only cached model calls; they are recomputed)"),
)


def _cache_error(path: Path, exc: Exception) -> CacheError:
    text = str(exc).lower()
    what, fix = next(((w, f) for words, w, f in _FIXES if any(x in text for x in words)),
                     (str(exc), "delete it"))
    return CacheError(f"cache {path}: {what} ({exc}); {fix}, or set PRBENCH_CACHE_DIR to another folder, "
                      "or pass --no-cache")


class Cache:
    """A persistent key -> JSON value store (one SQLite file), safe across threads and processes."""

    def __init__(self, path: str | Path | None = None, namespace: str = "calls"):
        self.path = Path(path) if path else default_cache_dir() / "cache.sqlite"
        self.namespace = namespace
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=60)
                conn.execute("PRAGMA journal_mode=WAL")
                with conn:
                    conn.execute("CREATE TABLE IF NOT EXISTS kv (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k))")
            except (sqlite3.Error, OSError) as exc:
                raise _cache_error(self.path, exc) from None
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Any | None:
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, Any] = {}
        if not keys:
            return out
        conn = self._conn()
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT k, v FROM kv WHERE ns = ? AND k IN ({','.join('?' * len(chunk))})"
                for k, v in conn.execute(q, [self.namespace, *chunk]):
                    out[k] = json.loads(v)
        except (sqlite3.Error, ValueError) as exc:
            raise _cache_error(self.path, exc) from None
        return out

    def put(self, key: str, value: Any) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[str, Any]) -> None:
        if not items:
            return
        try:
            with self._conn() as c:
                c.executemany(
                    "INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)",
                    [(self.namespace, k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()],
                )
        except sqlite3.Error as exc:
            raise _cache_error(self.path, exc) from None

    def __len__(self) -> int:
        try:
            return self._conn().execute("SELECT COUNT(*) FROM kv WHERE ns = ?", [self.namespace]).fetchone()[0]
        except sqlite3.Error as exc:
            raise _cache_error(self.path, exc) from None


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
