"""Caches never serve another model's numbers, and every cache problem is one line with the fix (issue 21).

- Fingerprints of local models carry a full content digest of their files (`prbench.fingerprint`),
  memoized by (path, size, mtime, ctime, inode): retraining into the same folder gives new keys.
- The SQLite cache file damaged, truncated, read-only or on a full disk: one line naming the file
  and the fix; `--no-cache` runs without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.errors import PrbenchError
from prbench.fingerprint import _MEMO, file_digest, local_digest, spec_digest
from prbench.store.cache import Cache, CacheError, NullCache
from prbench.testing.records import make_records
from prbench.testing.tiny import make_tiny_seq_classifier

PRBENCH = [sys.executable, "-m", "prbench"]


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    p = tmp_path / "bench.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in make_records(10)), encoding="utf-8")
    return p


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}


def test_retrain_into_the_same_folder_gives_new_scores_and_no_cache_hit(tmp_path: Path, data: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    model = make_tiny_seq_classifier(tmp_path / "rm", num_labels=1, seed=0)
    spec, cache = f"hf:{model}", Cache(tmp_path / "scores.sqlite", namespace="scores")
    old = evaluate(spec, str(data), "profile", out=tmp_path / "runs", cache=cache)
    keys = len(cache)
    assert keys == 20  # chosen and rejected of 10 items
    make_tiny_seq_classifier(model, num_labels=1, seed=1)  # "retrained": same folder, new weights
    with pytest.raises(PrbenchError, match=r"different config \(model_digest: \"[0-9a-f]+\" -> \"[0-9a-f]+\"\)"):
        evaluate(spec, str(data), "profile", out=tmp_path / "runs", cache=cache)  # never the old numbers
    new = evaluate(spec, str(data), "profile", out=tmp_path / "runs", cache=cache, overwrite=True)
    assert len(cache) == 2 * keys  # every key new: not one cache hit
    truth = evaluate(spec, str(data), "profile", cache=NullCache())  # the new weights, no cache at all
    scores = lambda res: [(r.score_chosen, r.score_rejected) for r in res.records]
    assert scores(new) == scores(truth) != scores(old)
    assert new.summary.model_info["fingerprint"]["weights"] != old.summary.model_info["fingerprint"]["weights"]


def _quick_digest(path: Path, chunk: int = 1 << 16) -> str:
    """The previous engine key: size + first and last 64 KiB (what issue 21 found colliding)."""
    data = path.read_bytes()
    return hashlib.sha256(str(len(data)).encode() + data[:chunk] + data[max(len(data) - chunk, chunk):]).hexdigest()


def test_safetensors_differing_only_in_a_middle_tensor_do_not_collide(tmp_path: Path, tiny_lm: Path) -> None:
    from prbench.engines.transformers_engine import TransformersEngine

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_lm, a)
    shutil.copytree(tiny_lm, b)
    weights = b / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    start, end = (8 + header_len + x for x in header["model.layers.0.mlp.down_proj.weight"]["data_offsets"])
    assert 1 << 16 < start < end < len(raw) - (1 << 16)  # the tensor lies between the first and last 64 KiB
    raw[start:end] = bytes(reversed(raw[start:end]))  # the same bytes, another tensor
    weights.write_bytes(bytes(raw))
    assert _quick_digest(a / "model.safetensors") == _quick_digest(weights)  # the old key collided here
    fa = TransformersEngine(str(a), device="cpu").fingerprint()
    fb = TransformersEngine(str(b), device="cpu").fingerprint()  # a valid checkpoint: it loads
    assert fa["weights"] != fb["weights"]
    assert local_digest(a) != local_digest(b) and spec_digest(f"judge:hf:{a}") == local_digest(a)


def test_digest_is_read_once_per_file_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "w.bin"
    f.write_bytes(b"x" * 1000)
    opened: list[Path] = []
    real_open = Path.open

    def counting_open(self: Path, *args, **kwargs):
        if self == f and (args[:1] or (kwargs.get("mode"),))[0] == "rb":
            opened.append(self)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counting_open)
    first = file_digest(f)
    assert first == hashlib.sha256(b"x" * 1000).hexdigest() and len(opened) == 1
    assert file_digest(f) == first and len(opened) == 1  # memoized in this process
    _MEMO.clear()
    assert file_digest(f) == first and len(opened) == 1  # memoized in the cache file (another process)
    f.write_bytes(b"y" * 1000)  # same size, same inode, new content
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert file_digest(f) == hashlib.sha256(b"y" * 1000).hexdigest() and len(opened) == 2


def _eval(env: dict[str, str], data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PRBENCH, "eval", "-q", "-m", "baseline:length", "-d", str(data), "-o", str(out), *extra],
                          check=False, env=env, capture_output=True, text=True, timeout=120)


def test_garbage_and_truncated_cache_files_name_the_file_and_the_fix(tmp_path: Path, data: Path,
                                                                     env: dict[str, str]) -> None:
    cache_file = tmp_path / "cache" / "cache.sqlite"
    assert _eval(env, data, tmp_path / "a").returncode == 0
    raw = cache_file.read_bytes()
    cache_file.write_bytes(raw[: len(raw) // 2])  # truncated
    res = _eval(env, data, tmp_path / "b")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"error: cache {cache_file}: it is damaged" in res.stderr and "delete it" in res.stderr
    cache_file.write_bytes(os.urandom(8192))  # garbage
    res = _eval(env, data, tmp_path / "c")
    assert res.returncode == 2 and f"cache {cache_file}: it is damaged" in res.stderr and "--no-cache" in res.stderr
    res = _eval(env, data, tmp_path / "c", "--no-cache")
    assert res.returncode == 0, res.stderr
    assert cache_file.read_bytes() != raw  # untouched by --no-cache: still the garbage


def test_read_only_cache_names_the_file_and_the_fix(tmp_path: Path, data: Path, env: dict[str, str]) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    script = f'mount --bind "{cache_dir}" "{cache_dir}" && mount -o remount,bind,ro "{cache_dir}" && exec "$@"'
    cmd = [*PRBENCH, "eval", "-q", "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs")]
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *cmd], check=False, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"cache {cache_dir / 'cache.sqlite'}: it cannot be written" in res.stderr
    assert "PRBENCH_CACHE_DIR" in res.stderr and "--no-cache" in res.stderr


def test_full_disk_names_the_file_and_the_fix(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    cache.put("k", 1)
    conn = cache._conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL, as on a full disk
    with pytest.raises(CacheError, match=rf"cache {tmp_path / 'c.sqlite'}: the disk is full \(database or disk is "
                                         r"full\); free disk space, or set PRBENCH_CACHE_DIR"):
        cache.put_many({f"k{i}": "x" * 1000 for i in range(200)})
    assert cache.get("k") == 1
    assert isinstance(sqlite3.sqlite_version, str)
