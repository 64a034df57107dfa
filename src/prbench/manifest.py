"""The manifest of a trained folder: size and sha256 of every file training wrote, checked at load.

Why: a truncated `model.safetensors` surfaced as a raw `SafetensorError`, an edited dimension as
a state-dict traceback, and a reordered user list in `config.json` loaded silently and changed
every per-user score. `prbench train` seals the folder when it has written it (`seal`); a
loader checks the seal first (`verify`) and names the one file that differs, with one line.
A folder `prbench train` wrote (it holds `prbench_rm.json`) but without a manifest is refused:
with the seal gone, flipped weights or a reordered user list would load silently. Folders
prbench did not write (a Hugging Face model, say) carry no manifest and load as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError

MANIFEST_FILE = "prbench_manifest.json"


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def seal(folder: str | Path) -> Path:
    """Write the manifest over every file now in `folder` (called again after any later write)."""
    from prbench.fingerprint import file_digest

    root = Path(folder)
    files = {p.relative_to(root).as_posix(): {"size": p.stat().st_size, "sha256": file_digest(p)}
             for p in _files(root)}
    path = root / MANIFEST_FILE
    path.write_text(json.dumps({"files": files}, indent=1, sort_keys=True), encoding="utf-8")
    return path


TRAINED_MARK = "prbench_rm.json"  # what every `prbench train` folder holds (prbench.rewards.folders)


def _read(root: Path, spec: str) -> dict[str, Any] | None:
    path = root / MANIFEST_FILE
    if not path.is_file():
        if (root / TRAINED_MARK).is_file():
            raise PrbenchError(f"{spec}: {path}: missing, though {TRAINED_MARK} says prbench trained this folder; "
                               "its files cannot be checked (a changed weight or user list would load silently): "
                               "retrain, or restore the folder with its manifest")
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        if isinstance(files, dict) and all(isinstance(v, dict) for v in files.values()):
            return files
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise PrbenchError(f"{spec}: {path}: damaged manifest (not what training wrote); retrain or restore the folder")


def verify(folder: str | Path, spec: str) -> None:
    """Refuse, naming the file, a folder whose files differ from what training wrote."""
    from prbench.fingerprint import file_digest

    root = Path(folder).expanduser()
    files = _read(root, spec)
    for name, want in sorted((files or {}).items()):
        p = root / name
        if not p.is_file():
            problem = "missing"
        elif p.stat().st_size != want.get("size"):
            problem = f"changed since training ({p.stat().st_size} bytes, training wrote {want.get('size')})"
        elif file_digest(p) != want.get("sha256"):
            problem = "changed since training (same size, another sha256)"
        else:
            continue
        raise PrbenchError(f"{spec}: {p}: {problem}; retrain or restore the folder")


def load_weights(module: Any, path: Path, spec: str) -> None:
    """`module.load_state_dict` from a safetensors file; any failure is one line naming the file."""
    from safetensors.torch import load_file

    try:
        module.load_state_dict(load_file(str(path)))
    except Exception as exc:  # noqa: BLE001 - SafetensorError, a shape or key mismatch: the file is not the model's
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise PrbenchError(f"{spec}: {path}: cannot load these weights ({reason})") from None
