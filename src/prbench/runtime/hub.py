"""Fail fast on model and dataset references, before any library starts its retry loop.

A reference is a local folder or a Hugging Face Hub id. A path-like reference that does not
exist ("./bt-heda", "runs/model", "~/m") is a missing folder, said at once (with the closest
sibling), never sent to the hub as an id. A hub id is checked with one request: offline
(`HF_HUB_OFFLINE=1`) or unreachable, it fails in one line saying how to point at a local
folder, instead of ~50 s of retries ending in a paragraph; a model already in the local hub
cache is used as it is.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from prbench.errors import SpecError

# What the hub accepts as a repo id: "name" or "owner/name", alphanumerics, '-', '_', '.'.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
_PROBE_TIMEOUT_S = 5.0


def looks_local(ref: str) -> bool:
    """A reference the user meant as a path: hub ids never start with '.', '/' or '~' nor hold two slashes."""
    return ref.startswith((".", "/", "~", "\\")) or ref.count("/") > 1 or ref.endswith("/") or "\\" in ref


def no_such_folder(ref: str, spec_prefix: str, what: str = "folder") -> SpecError:
    """'<prefix>:<ref>: no such folder', with the closest existing sibling when one is near."""
    path = Path(ref).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    try:
        siblings = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    except OSError:
        siblings = []
    close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.6)
    suggestion = str(parent / close[0]) if close and str(parent) != "." else (close[0] if close else "")
    hint = f"; did you mean {_label(suggestion, spec_prefix)}?" if close else ""
    return SpecError(f"{_label(ref, spec_prefix)}: no such {what} ({path.resolve()} does not exist){hint}")


def _label(ref: str, spec_prefix: str) -> str:
    return f"{spec_prefix}:{ref}" if spec_prefix else ref


def require_folder(ref: str, spec_prefix: str) -> str:
    """For kinds that only ever read a local folder (`bt:`, `pal:`)."""
    if not Path(ref).expanduser().is_dir():
        raise no_such_folder(ref, spec_prefix)
    return ref


def offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def _cached(repo_id: str, repo_type: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    probe = "config.json" if repo_type == "model" else "README.md"
    try:
        found = try_to_load_from_cache(repo_id, probe, repo_type=repo_type)
    except (ValueError, OSError):  # an odd id or a damaged cache: not cached, say so below
        return False
    return isinstance(found, str)


def probe_hub(repo_id: str, repo_type: str = "model") -> str | None:
    """One request, no retries: None if the hub answers for `repo_id`, else why not."""
    import urllib.error
    import urllib.request

    try:
        from huggingface_hub import constants, get_token
        endpoint, token = constants.ENDPOINT, get_token()
    except ImportError:
        return "huggingface_hub is not installed"
    kind = "models" if repo_type == "model" else "datasets"
    req = urllib.request.Request(f"{endpoint}/api/{kind}/{repo_id}", method="GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=_PROBE_TIMEOUT_S) as resp:
            resp.read(1)
        return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404):
            return f"not found: the hub has no public {repo_type} {repo_id!r} (private or gated? set HF_TOKEN)"
        return f"the hub answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"the Hugging Face Hub is unreachable ({reason})"


def check_ref(ref: str, spec_prefix: str = "hf", repo_type: str = "model") -> str:
    """`ref` unchanged if it is an existing path or a hub id that can be used now; else a one-line SpecError."""
    if not ref:
        raise SpecError(f"{spec_prefix}: needs a folder or hub id")
    try:
        if Path(ref).expanduser().exists():
            return ref
    except (OSError, ValueError):
        pass
    if looks_local(ref) or not _HUB_ID.fullmatch(ref):
        raise no_such_folder(ref, spec_prefix)
    if _cached(ref, repo_type):
        return ref
    what = "folder or cached hub model" if repo_type == "model" else "local file or folder"
    fix = (f"download it where the hub is reachable (e.g. `hf download {ref} --local-dir DIR`) "
           f"and pass {spec_prefix}:DIR" if repo_type == "model"
           else "download it where the hub is reachable and pass the local file or folder")
    label = _label(ref, spec_prefix)
    if offline():
        raise SpecError(f"{label}: no such {what}, and hub access is off (HF_HUB_OFFLINE); {fix}")
    why = probe_hub(ref, repo_type)
    if why is None:
        return ref
    if why.startswith("not found"):
        raise SpecError(f"{label}: no such local folder, and {why}")
    raise SpecError(f"{label}: no such {what}, and {why}; {fix}")
