"""Run folders: config, append-only per-example records, summary.

A run folder holds `config.json` (what was asked), `examples.jsonl` (one line per example,
appended, flushed and fsynced as it completes) and `summary.json` (written via a temp file
and rename). Re-running the same config skips ids already recorded; a half-written last
line from a crash is dropped on resume, so the final files equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prbench.cache import content_key
from prbench.errors import PrbenchError

_SECRET_NAME = re.compile(r"(api_?key|secret|password|passwd|^((hf|hub|api|access|auth|openai)_?)?token)$",
                          re.IGNORECASE)  # not pad_token / eos_token: those name special tokens
_SECRET_VALUE = re.compile(r"(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                           r"|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|Bearer\s+\S{8,}")


def refuse_secrets(options: dict[str, Any], what: str = "model_options") -> None:
    """Raise when options hold a secret (a key-like name or value): run folders must never store one."""
    for name, value in options.items():
        if isinstance(value, dict):
            refuse_secrets(value, f"{what}.{name}")
        elif _SECRET_NAME.search(str(name)) or (isinstance(value, str) and _SECRET_VALUE.search(value)):
            raise PrbenchError(f"{what}: {name!r} looks like a secret; pass secrets through the environment: "
                               "api_key_env=NAME (the name of the variable that holds it)")


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


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


class RunDir:
    """One run's folder. `config` must match on resume, else the folder belongs to another run."""

    def __init__(self, path: str | Path, config: dict[str, Any], overwrite: bool = False):
        self.path = Path(path)
        self.config = config
        self.examples_path = self.path / "examples.jsonl"
        self.summary_path = self.path / "summary.json"
        cfg_path = self.path / "config.json"
        if cfg_path.exists() and not overwrite:
            old = read_json(cfg_path)
            if _comparable(old) != _comparable(json.loads(json.dumps(config, default=str))):
                raise PrbenchError(
                    f"{self.path} holds a run with a different config; choose another --out or pass --overwrite"
                )
        if overwrite:
            for p in (self.examples_path, self.summary_path):
                p.unlink(missing_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cfg_path, config)
        self._repair_tail()

    def _repair_tail(self) -> None:
        """Drop a partial last line left by a crash mid-write."""
        if not self.examples_path.exists():
            return
        data = self.examples_path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data[: data.rfind(b"\n") + 1]
            with self.examples_path.open("r+b") as fh:
                fh.truncate(len(keep))

    def records(self) -> list[dict[str, Any]]:
        if not self.examples_path.exists():
            return []
        with self.examples_path.open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def done_ids(self) -> set[str]:
        return {r["id"] for r in self.records()}

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append records durably (flush + fsync) so a kill never loses a finished example."""
        lines = "".join(dumps(r) + "\n" for r in records)
        if not lines:
            return
        with self.examples_path.open("a", encoding="utf-8") as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace all records at once (temp file + rename): used to drop failures or fix order."""
        tmp = self.examples_path.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write("".join(dumps(r) + "\n" for r in records))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.examples_path)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)


_VOLATILE = {"batch_size", "workers", "ray_address", "quiet"}


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    """Config minus settings that cannot change results (batch size, worker count)."""
    return {k: v for k, v in config.items() if k not in _VOLATILE}
