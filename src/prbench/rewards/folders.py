"""Folders written by `prbench train`: recognised whatever prefix the user typed.

Every trained folder holds `prbench_rm.json` whose `kind` says what it is: `bt` (a full
sequence classifier fine-tuned with TRL: loads as `bt:<dir>` or `hf:<dir>`), or a head over a
frozen encoder (`context-bt` from `train bt --frozen-encoder`, `pal-a` / `pal-b` from
`train pal`: `bt:<dir>` or `pal:<dir>`). A prefix that cannot read the folder fails at once
with the spec that can, instead of a tokenizer or safetensors error deep inside a loader. The
RM keeps the spec the user wrote as its name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prbench.errors import SpecError

HEAD_KINDS = ("context-bt", "pal-a", "pal-b")
_TRAINED_BY = {"context-bt": "prbench train bt --frozen-encoder", "pal-a": "prbench train pal",
               "pal-b": "prbench train pal", "bt": "prbench train bt --base-model"}


def trained_meta(folder: str | Path) -> dict[str, Any] | None:
    """What a prbench training run wrote into `prbench_rm.json`, if anything."""
    try:
        meta = json.loads((Path(folder).expanduser() / "prbench_rm.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def trained_kind(folder: str | Path) -> str | None:
    """The `kind` a prbench training run wrote into `prbench_rm.json`, if any."""
    kind = (trained_meta(folder) or {}).get("kind")
    return kind if isinstance(kind, str) else None


def suggested_spec(folder: str) -> str | None:
    """The spec that reads a prbench-written folder (None for folders prbench did not write)."""
    kind = trained_kind(folder)
    if kind == "bt":
        return f"bt:{folder}"
    if kind == "context-bt":
        return f"bt:{folder}"
    if kind in ("pal-a", "pal-b"):
        return f"pal:{folder}"
    return None


def require_folder(spec: str, folder: str | Path, kind: str) -> None:
    """Refuse a trained-model spec whose folder does not exist: "no trained model at ...", with the command that
    writes one (not a list of files it would hold, which read as if the folder were damaged)."""
    p = Path(folder).expanduser()
    if not p.is_dir():
        what = "a file, not a folder" if p.exists() else "no such folder"
        raise SpecError(f"{spec}: no trained model at {p} ({what}; train one with `prbench train {kind} ... --out {p}`)")


def wrong_prefix(prefix: str, folder: str, kind: str) -> SpecError:
    return SpecError(f"{prefix}:{folder}: this folder holds a {kind} model written by `{_TRAINED_BY.get(kind, 'prbench')}`, "
                     f"which {prefix}: cannot read; use {suggested_spec(folder)}")


def check_classifier_folder(rest: str, prefix: str = "hf") -> None:
    """`hf:` reads sequence classifiers: a prbench head folder names its own spec; a missing one fails now."""
    if rest.startswith("builtin:"):
        return
    from prbench.runtime.hub import check_ref

    check_ref(rest, prefix)
    kind = trained_kind(rest)
    if kind in HEAD_KINDS:
        raise wrong_prefix(prefix, rest, kind)
