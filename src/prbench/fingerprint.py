"""Content digests of local model files, for fingerprints (and so cache keys) of local models.

Why: a cache key that names only a folder serves the old model's scores after someone retrains
into that folder. Every RM or engine kind that reads local files puts `local_digest(path)` into
its `fingerprint()`, so new weights always mean new keys.

Each file is hashed in full (sha256) once; the digest is memoized by (path, size, mtime,
ctime, inode), in this process and in the cache's SQLite file, so a 15 GB checkpoint costs one
read per change, not one per run. A folder's digest covers every top-level regular file except
hidden ones (weights, configs, tokenizer files: all of them decide the scores).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

_MEMO: dict[tuple, str] = {}
_BLOCK = 1 << 20


def _stat_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _persistent() -> Any:
    from prbench.store.cache import Cache

    return Cache(namespace="file-digests")


def file_digest(path: str | Path) -> str:
    """sha256 of a file's whole content, read once per (path, size, mtime, ctime, inode)."""
    from prbench.store.cache import CacheError, content_key

    p = Path(path)
    key = _stat_key(p)
    if key in _MEMO:
        return _MEMO[key]
    store, memo_key = None, content_key("file-digest", *key)
    try:
        store = _persistent()
        hit = store.get(memo_key)
    except CacheError:
        store, hit = None, None  # the memo is only a speed-up: hash the file instead
    if hit is None:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(_BLOCK), b""):
                h.update(block)
        hit = h.hexdigest()
        if _stat_key(p) != key:  # changed while we read it: do not memoize a torn read
            return hit
        if store is not None:
            try:
                store.put(memo_key, hit)
            except CacheError:
                pass
    _MEMO[key] = hit
    return hit


def folder_digest(directory: str | Path) -> str:
    """One digest over the names and contents of a folder's top-level, non-hidden files."""
    d = Path(directory)
    h = hashlib.sha256()
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or not p.is_file():
            continue
        h.update(p.name.encode("utf-8") + b"\0" + file_digest(p).encode() + b"\n")
    return h.hexdigest()[:32]


def local_digest(model: str | os.PathLike | None) -> str | None:
    """The content digest of a local model folder or file; None for a hub id or a name."""
    if model is None:
        return None
    p = Path(model).expanduser()
    if p.is_dir():
        return folder_digest(p)
    if p.is_file():
        return file_digest(p)[:32]
    return None


def spec_digest(spec: str) -> str | None:
    """Content digest of the local files a spec names (`hf:DIR`, `judge:hf:DIR`, `py:FILE:Class` ...).

    Why: a finished run folder is keyed by its spec; recording this digest in the run's config
    makes a retrained model a config change (named, refused or `--overwrite`), never old numbers.
    """
    rest = spec
    while rest:
        head, sep, tail = rest.partition(":")
        if head == "py":
            return local_digest(tail.rpartition(":")[0] or None)
        digest = local_digest(tail) if sep and not tail.startswith("builtin:") else None
        if digest is not None:
            return digest
        rest = tail if sep else ""
    return None


def data_digest(data: str | os.PathLike) -> str | None:
    """Content digest of a local data source: a file, or every non-hidden file under a folder
    (names relative to it, so the same files elsewhere give the same digest); a built-in sample
    by its shipped file; None for a hub id.

    Why: a finished run is reused by its config; with only the data's name in it, the same name
    in another folder (or a file edited in place) would return the earlier numbers.
    """
    from prbench.raw import SAMPLE_FILES, sample_path

    text = str(data)
    p = sample_path(text) if text in SAMPLE_FILES else Path(text).expanduser()
    try:
        if p.is_file():
            return file_digest(p)[:32]
        if not p.is_dir():
            return None
    except (OSError, ValueError):
        return None
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        rel = f.relative_to(p)
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(rel.as_posix().encode("utf-8") + b"\0" + file_digest(f).encode() + b"\n")
    return h.hexdigest()[:32]
