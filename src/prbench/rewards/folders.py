"""`bt:<dir>`: a folder written by `prbench train bt`, whichever of its two formats it holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEAD_KINDS = ("context-bt", "pal-a", "pal-b")


def trained_kind(folder: str | Path) -> str | None:
    """The `kind` a prbench training run wrote into `prbench_rm.json`, if any."""
    try:
        return json.loads((Path(folder) / "prbench_rm.json").read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def load_bt(rest: str, **options: Any):
    """A head over a frozen encoder loads like PAL (same file format); a full model as a classifier."""
    if trained_kind(rest) in HEAD_KINDS:
        from prbench.rewards.pal import PALReward

        return PALReward(rest, spec=f"bt:{rest}", **options)
    from prbench.rewards.classifier import SequenceClassifierRM

    return SequenceClassifierRM(rest, spec=f"bt:{rest}", **options)
