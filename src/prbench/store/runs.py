"""Run folders: config, append-only per-example records, summary; one writer at a time.

A run folder holds `config.json` (what was asked), `examples.jsonl` (one line per example,
appended, flushed and fsynced as it completes) and `summary.json` (written via a temp file
and rename). Re-running the same config skips ids already recorded; a half-written last
line from a crash is dropped on resume, so the final files equal an uninterrupted run's.

Integrity rules (why: two writers or a damaged file must never turn into a wrong number):
- One writer: an OS lock (`flock` on `.lock`, which holds the writer's pid, removed on close) is
  held from opening until the RunDir is closed or dropped. A second process fails at once, naming that pid. In one
  process, opening the folder again takes the lock over and the older RunDir can no longer write.
- Each id at most once: `append` refuses an id already recorded; loading a file with a
  duplicate id, an unparseable line or a record without an id fails naming file and line
  (`repair=True` keeps the first record of each id, drops the rest and says how many).
- A run that failed before writing any record or summary leaves nothing behind (the folder it
  created is removed), and a leftover config of such a run never blocks a corrected command.
- A finished run opens on read-only media: nothing is written unless something changed.
- URLs are stored with userinfo and secret-looking query parameters redacted.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import sys
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prbench.errors import DataError, PrbenchError, RunBusy
from prbench.store.cache import content_key

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - Windows has no fcntl: no OS lock
    fcntl = None

log = logging.getLogger(__name__)

_SECRET_NAME = re.compile(r"(api_?key|secret|password|passwd|^((hf|hub|api|access|auth|openai)_?)?token)$",
                          re.IGNORECASE)  # not pad_token / eos_token: those name special tokens
_SECRET_VALUE = re.compile(r"(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                           r"|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|Bearer\s+\S{8,}")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]+@")
_URL_SECRET_PARAM = re.compile(r"(?i)([?&;][^=&#\s]*(?:key|token|secret|password|passwd|pass|pwd|sig|signature"
                               r"|auth|credential|session)[^=&#\s]*=)[^&#\s]*")
REDACTED = "REDACTED"
# Bounds checked before anything is allocated (why: a 2 GB sparse examples.jsonl was read whole, 4.8 GB of memory,
# before it was refused). A record is kilobytes, a summary or downstream.json megabytes at most.
MAX_LINE_BYTES = 64 * 1024 * 1024  # one JSONL line (the data reader's own bound, prbench.raw)
MAX_JSON_BYTES = 256 * 1024 * 1024  # one JSON file


def refuse_secrets(options: dict[str, Any], what: str = "model_options") -> None:
    """Raise when options hold a secret (a key-like name or value): run folders must never store one."""
    for name, value in options.items():
        if isinstance(value, dict):
            refuse_secrets(value, f"{what}.{name}")
        elif isinstance(value, bool) or value is None:
            continue  # a switch (no_api_key) or an unset option holds no secret
        elif _SECRET_NAME.search(str(name)) or (isinstance(value, str) and _SECRET_VALUE.search(value)):
            raise PrbenchError(f"{what}: {name!r} looks like a secret; pass secrets through the environment: "
                               "api_key_env=NAME (the name of the variable that holds it)")


def secret_name(name: str) -> bool:
    """Whether a setting's or query parameter's name says it holds a secret (api_key, token, ...)."""
    return bool(_SECRET_NAME.search(name) or _URL_SECRET_PARAM.search(f"?{name}="))


def redact_url(text: str) -> str:
    """`http://user:pw@host/?api_key=x&a=1` -> `http://REDACTED@host/?api_key=REDACTED&a=1`.

    Secret query parameters are redacted in any text, with or without a scheme (a server's error names the bare
    path it was sent: `no route /v1/chat/completions?api_key=x`)."""
    if "://" in text:
        text = _URL_USERINFO.sub(rf"\1{REDACTED}@", text)
    return _URL_SECRET_PARAM.sub(rf"\1{REDACTED}", text) if "=" in text else text


def redact(obj: Any) -> Any:
    """A copy of JSON-like `obj` with every URL's credentials redacted (what run folders store)."""
    if isinstance(obj, str):
        return redact_url(obj)
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def slug(text: str, max_len: int = 60) -> str:
    """A file-name-safe, readable rendering of a spec plus a short hash against collisions."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:max_len]
    return f"{clean}-{content_key(text)[:6]}"


def dumps(obj: Any) -> str:
    """Canonical one-line JSON: the same record always gives the same bytes."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so a reader never sees a half-written file (temp file + fsync + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, ensure_ascii=False, indent=2, sort_keys=True, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def regular_file(path: Path, fix: str = "delete it or restore it from a backup") -> bool:
    """Whether `path` is there (False when absent); a directory, FIFO, socket or symlink loop is a DataError.

    Why: opening a FIFO blocks every reader for ever, and a directory or a loop fails with an
    error naming nothing; a reader asks this first and refuses with one line instead.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DataError(str(path), None, None, f"a symlink to nothing; {fix}") from None
        return False
    except OSError as exc:
        raise DataError(str(path), None, None, f"cannot be read ({exc.strerror or type(exc).__name__}); {fix}"
                        ) from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "not a regular file"
        raise DataError(str(path), None, None, f"{what}, not a file; {fix}")
    return True


def _problem(exc: BaseException) -> str:
    """What is wrong with a JSON text, in a few words (5,000-digit integers, nesting too deep, bad syntax)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    if isinstance(exc, json.JSONDecodeError):
        return f"damaged JSON ({exc.msg})"
    return str(exc).split(";")[0][:120] or type(exc).__name__


def read_json(path: Path, fix: str = "delete it or restore it from a backup") -> Any:
    """A JSON file, or a DataError naming the file, the line and what to do (never hangs on a FIFO)."""
    if not regular_file(Path(path), fix):
        raise DataError(str(path), None, None, f"missing; {fix}")
    try:
        if (size := os.stat(path).st_size) > MAX_JSON_BYTES:
            raise DataError(str(path), None, None, f"{size} bytes, more than the {MAX_JSON_BYTES} a JSON file of "
                                                   f"prbench's may hold (damaged?); {fix}")
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(str(path), None, None, f"not UTF-8 text; {fix}") from None
    except OSError as exc:
        raise DataError(str(path), None, None, f"cannot be read ({exc.strerror or type(exc).__name__}); {fix}"
                        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(str(path), exc.lineno, None, f"{_problem(exc)}; {fix}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; nesting deeper than the stack
        raise DataError(str(path), None, None, f"{_problem(exc)}; {fix}") from None


def scan_records(path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, str, str | None, str]]]:
    """Records of a JSONL file in order (first of each id), and its problems: (line, kind, field, reason).

    A path that is no regular file (a directory, a FIFO, a loop) or cannot be read is a DataError.
    """
    out: list[dict[str, Any]] = []
    problems: list[tuple[int, str, str | None, str]] = []
    if not regular_file(path, "rerun the command that wrote this run"):
        return out, problems
    seen: dict[Any, int] = {}
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(str(path), None, None, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    with fh:
        for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:  # no record is this long: pass over the rest of it, a block at a time
                while not raw.endswith(b"\n") and (raw := fh.read(1 << 24)):
                    if (i := raw.find(b"\n")) >= 0:
                        fh.seek(i + 1 - len(raw), os.SEEK_CUR)
                        break
                problems.append((n, "unreadable", None, f"a line longer than {MAX_LINE_BYTES} bytes (damaged?)"))
                continue
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                problems.append((n, "unreadable", None, f"not a JSON record ({_problem(exc)})"))
                continue
            rid = rec.get("id") if isinstance(rec, dict) else None
            if not isinstance(rid, (str, int)) or isinstance(rid, bool):
                problems.append((n, "unreadable", "id", "record without an id"))
                continue
            if rid in seen:
                problems.append((n, "duplicate", "id", f"duplicate id {rid!r} (first on line {seen[rid]})"))
                continue
            seen[rid] = n
            out.append(rec)
    return out, problems


def read_records(path: Path, fix: str = "rerun the same command with --repair to keep the first record of each "
                                        "id and drop the rest (dropped items are scored again)") -> list[dict[str, Any]]:
    """Every record of a run's JSONL file, or a DataError naming the file, the first bad line and the fix."""
    recs, problems = scan_records(Path(path))
    if problems:
        line, _, field, reason = problems[0]
        more = f" ({len(problems) - 1} more such lines)" if len(problems) > 1 else ""
        raise DataError(str(path), line, field, f"{reason}{more}; {fix}")
    return recs


def _count_lines(path: Path) -> int:
    """Newline-ended lines of a file, counted in blocks (a line of any length costs no memory)."""
    if not path.is_file():
        return 0
    with path.open("rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))


_HELD: dict[str, weakref.ref[RunDir]] = {}  # resolved path -> the RunDir of this process that holds its lock


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        return {k: v for key, val in obj.items() for k, v in _flatten(val, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): obj}


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`field: old -> new` for each setting that differs (nested options named with dots)."""
    a, b = _flatten(old), _flatten(new)
    return [f"{k}: {json.dumps(a.get(k))} -> {json.dumps(b.get(k))}" for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k)]


class RunDir:
    """One run's folder. `config` must match on resume, else the folder belongs to another run."""

    records_file = "examples.jsonl"  # the append-only per-example file
    overwrite_also: tuple[str, ...] = ()  # other files an --overwrite discards

    def __init__(self, path: str | Path, config: dict[str, Any], overwrite: bool = False, repair: bool = False,
                 *, scope: tuple[str, ...] = ()):
        """`scope`: settings that only say how many items the run covers (eval's `limit`); a change in
        them is the driver's to reconcile (extend or read), not another run."""
        self.path = Path(path)
        self.config = config
        self.examples_path = self.path / self.records_file
        self.summary_path = self.path / "summary.json"
        self.config_path = self.path / "config.json"
        self.repaired: dict[str, int] = {}
        self._ids: set[Any] | None = None
        self._state: dict[str, Any] = {"wrote": False, "fd": None}
        key = str(self.path.resolve())
        old_ref = _HELD.get(key)
        older = old_ref() if old_ref is not None else None
        if older is not None:
            older.close()  # reopened in this process: the older handle may no longer write
        created = self._mkdirs()
        self._state["fd"] = self._lock()
        _HELD[key] = weakref.ref(self)
        self._finalizer = weakref.finalize(self, _release, self._state, self.path, created)
        stored = redact(json.loads(json.dumps(config, default=str)))
        if self.config_path.exists() and not overwrite:
            old_cfg = read_json(self.config_path, "delete the folder or pass --overwrite")
            old_cfg = old_cfg if isinstance(old_cfg, dict) else {"config": old_cfg}
            # a leftover config of a run that failed before its first record: the new config takes over
            if _comparable(old_cfg, scope) != _comparable(stored, scope) and self._has_results():
                n = _count_lines(self.examples_path)
                diff = "; ".join(config_diff(_comparable(old_cfg), _comparable(stored)))
                raise PrbenchError(
                    f"{self.path} holds a run with a different config ({diff}); to keep it, choose another "
                    f"--out; to discard its {n} recorded examples, pass --overwrite")
        if overwrite:  # under the lock: never while another process writes
            for p in (self.examples_path, self.summary_path, *(self.path / f for f in self.overwrite_also)):
                p.unlink(missing_ok=True)
        if not self.config_path.exists() or read_json(self.config_path) != stored:
            try:
                write_json_atomic(self.config_path, stored)
            except OSError as exc:
                if not self._read_only(exc) or _comparable(read_json(self.config_path)) != _comparable(stored):
                    raise self._write_error(exc) from None
        self._repair_tail()
        if repair:
            self.repair()

    # -- lock and lifetime ----------------------------------------------------------------
    def _mkdirs(self) -> list[Path]:
        """Create the folder (and parents); return those created, deepest first, for cleanup."""
        created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._write_error(exc) from None
        return created

    def _lock(self) -> int | None:
        if fcntl is None:
            return None
        lock_path = self.path / ".lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            try:
                fd = os.open(lock_path, os.O_RDONLY)
            except OSError:
                return None  # read-only media with no lock file: nothing can write here anyway
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                return None  # the file system has no locks (some network mounts)
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunBusy(f"{self.path} is being written by another prbench process (pid {holder}); wait for it "
                          "to finish (a second writer would record every example twice) or choose another --out"
                          ) from None
        try:
            if os.fstat(fd).st_ino != os.stat(lock_path).st_ino:  # removed by a failed start meanwhile
                os.close(fd)
                return self._lock()
        except FileNotFoundError:
            os.close(fd)
            return self._lock()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # read-only lock file: still locked
        return fd

    def close(self) -> None:
        """Release the lock (and remove the folder if this run wrote nothing into it)."""
        self._finalizer()

    def _check_writable(self) -> None:
        if not self._finalizer.alive:
            raise PrbenchError(f"{self.path} was reopened by another writer in this process; this handle "
                               "can no longer write (one writer per run folder)")

    @staticmethod
    def _read_only(exc: OSError) -> bool:
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)

    def _write_error(self, exc: OSError) -> PrbenchError:
        what = {errno.EROFS: "is on read-only media", errno.EACCES: "is not writable",
                errno.EPERM: "is not writable", errno.ENOSPC: "is on a full disk",
                errno.EDQUOT: "is over its disk quota"}.get(exc.errno or 0, f"cannot be written ({exc.strerror})")
        return PrbenchError(f"{self.path} {what}: a finished run can be read there, but this one needs to write; "
                            "copy the folder somewhere writable and point --out there, or free space")

    def _has_results(self) -> bool:
        return self.summary_path.exists() or (self.examples_path.exists() and self.examples_path.stat().st_size > 0)

    # -- records --------------------------------------------------------------------------
    def _repair_tail(self) -> None:
        """Drop a partial last line left by a crash mid-write (read from the end, a block at a time)."""
        if not regular_file(self.examples_path, "rerun with --overwrite"):
            return
        with self.examples_path.open("rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            pos, keep = end, 0
            while pos > 0:
                step = min(pos, 1 << 16)
                pos -= step
                fh.seek(pos)
                block = fh.read(step)
                if pos + step == end and block.endswith(b"\n"):
                    return  # whole
                if (i := block.rfind(b"\n")) >= 0:
                    keep = pos + i + 1
                    break
        if end == 0 or keep == end:
            return
        try:
            with self.examples_path.open("r+b") as fh:
                fh.truncate(keep)
        except OSError as exc:
            raise self._write_error(exc) from None

    def _scan(self) -> tuple[list[dict[str, Any]], list[tuple[int, str, str | None, str]]]:
        return scan_records(self.examples_path)

    def records(self) -> list[dict[str, Any]]:
        recs = read_records(self.examples_path)
        self._ids = {r["id"] for r in recs}
        return recs

    def repair(self) -> dict[str, int]:
        """Keep the first record of each id, drop duplicates and unreadable lines; say how many."""
        recs, problems = self._scan()
        if problems:
            counts = {"duplicate": sum(p[1] == "duplicate" for p in problems),
                      "unreadable": sum(p[1] == "unreadable" for p in problems)}
            self.rewrite(recs)
            self.repaired = counts
            log.warning("%s: --repair dropped %d lines (%d duplicate ids, %d unreadable or without an id); "
                        "kept %d records", self.examples_path, len(problems), counts["duplicate"],
                        counts["unreadable"], len(recs))
        return self.repaired

    def done_ids(self) -> set[str]:
        return {r["id"] for r in self.records()}

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append records durably (flush + fsync) so a kill never loses a finished example."""
        records = list(records)
        if not records:
            return
        self._check_writable()
        known = self._ids if self._ids is not None else {r["id"] for r in self.records()}
        ids = [r["id"] for r in records]
        dup = next((i for i in ids if i in known), None) if len(set(ids)) == len(ids) else ids[0]
        if dup is not None:
            raise PrbenchError(f"{self.examples_path}: refusing to record id {dup!r} twice")
        lines = "".join(dumps(r) + "\n" for r in records)
        try:
            with self.examples_path.open("a", encoding="utf-8") as fh:
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise self._write_error(exc) from None
        known.update(ids)
        self._ids = known
        self._state["wrote"] = True

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace all records at once (temp file + rename): used to drop failures or fix order."""
        self._check_writable()
        records = list(records)
        ids = [r["id"] for r in records]
        if len(set(ids)) != len(ids):
            raise PrbenchError(f"{self.examples_path}: refusing to write an id twice")
        tmp = self.examples_path.with_suffix(".jsonl.tmp")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                fh.write("".join(dumps(r) + "\n" for r in records))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.examples_path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise self._write_error(exc) from None
        self._ids = set(ids)
        self._state["wrote"] = True

    def previous_summary(self) -> dict[str, Any] | None:
        """The stored summary; a damaged one is ignored with a warning (it is recomputed from the records)."""
        if not self.summary_path.exists():
            return None
        try:
            s = read_json(self.summary_path)
        except DataError as exc:
            log.warning("%s; it is recomputed from %s", exc, self.examples_path.name)
            return None
        return s if isinstance(s, dict) else None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json, after checking it against its kind's model: never a file the readers would refuse."""
        from prbench.store.records import SUMMARY_MODELS, run_kind, typed_summary

        self._check_writable()
        if run_kind(summary) in SUMMARY_MODELS:
            typed_summary(summary, self.summary_path)
        try:
            write_json_atomic(self.summary_path, redact(summary))
        except OSError as exc:
            raise self._write_error(exc) from None
        self._state["wrote"] = True


def close_under(folder: str | Path) -> None:
    """Close every run folder this process holds below `folder` (e.g. when a study fails)."""
    base = Path(folder).resolve()
    for key, ref in list(_HELD.items()):
        run = ref()
        if run is not None and Path(key).is_relative_to(base):
            run.close()


def _release(state: dict[str, Any], path: Path, created: list[Path]) -> None:
    """Unlock; a folder this run created and never wrote a record or summary into is removed."""
    fd = state.pop("fd", None)
    try:
        leftover = set(os.listdir(path)) <= {"config.json", ".lock"}
    except OSError:
        leftover = False
    if not state["wrote"] and created and leftover:
        for name in ("config.json", ".lock"):
            (path / name).unlink(missing_ok=True)
        for p in created:
            try:
                p.rmdir()  # only if empty: never removes what someone else put there
            except OSError:
                break
    if fd is not None:
        try:
            (path / ".lock").unlink(missing_ok=True)  # a finished folder holds only its results
        except OSError:
            pass  # read-only media
        os.close(fd)


_VOLATILE = {"batch_size", "workers", "ray_address", "quiet"}


def _comparable(config: dict[str, Any], scope: tuple[str, ...] = ()) -> dict[str, Any]:
    """Config minus settings that cannot change results (batch size, worker count), and minus `scope`."""
    return {k: v for k, v in config.items() if k not in _VOLATILE and k not in scope}
