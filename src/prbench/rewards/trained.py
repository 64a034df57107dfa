"""Loaders of the folders `prbench train` writes: `bt:<dir>` and `pal:<dir>` (see `folders`)."""

from __future__ import annotations

from typing import Any

from prbench.rewards.folders import HEAD_KINDS, trained_kind, wrong_prefix
from prbench.specs import Kind, folder


def _load_bt(rest: str, **options: Any):
    """A head over a frozen encoder loads like PAL (same file format); a full model as a classifier."""
    from prbench.runtime.hub import require_folder

    require_folder(rest, "bt")
    if trained_kind(rest) in HEAD_KINDS:
        from prbench.rewards.pal import PALReward

        return PALReward(rest, spec=f"bt:{rest}", **options)
    from prbench.manifest import verify
    from prbench.rewards.classifier import SequenceClassifierRM

    verify(rest, f"bt:{rest}")
    return SequenceClassifierRM(rest, spec=f"bt:{rest}", **options)


def _load_pal(rest: str, **options: Any):
    """`pal:<dir>`: a PAL or context-BT head folder; a full BT classifier folder names its spec."""
    from prbench.runtime.hub import require_folder

    require_folder(rest, "pal")
    kind = trained_kind(rest)
    if kind == "bt":
        raise wrong_prefix("pal", rest, kind)
    from prbench.rewards.pal import PALReward

    return PALReward(rest, spec=f"pal:{rest}", **options)


def _pal_class(rest: str):
    from prbench.rewards.pal import PALReward

    return PALReward


def _bt_options(rest: str):
    """A head folder takes a head's options, a full model a classifier's."""
    if trained_kind(rest) in HEAD_KINDS:
        from prbench.rewards.pal import PALOptions

        return PALOptions
    from prbench.rewards.classifier import ClassifierOptions

    return ClassifierOptions


def _pal_options(rest: str):
    from prbench.rewards.pal import PALOptions

    return PALOptions


# always a local folder; PAL's class is known without loading weights (capabilities)
load_pal = Kind(_load_pal, model_class=_pal_class, options_model=_pal_options, resolve_spec=folder)
load_bt = Kind(_load_bt, options_model=_bt_options, resolve_spec=folder)
