"""The personalization validity card: is a run's accuracy under a user condition due to the user?

A run under a user condition (`profile`, `history`, `persona`) has a control: the same RM on the
same items shown *another* user's evidence (`wrong-profile`, `wrong-history`, `wrong-persona`).
When both runs sit side by side in a runs folder (`prbench eval -c profile,wrong-profile`), the
condition run's summary gets a `validity` card:
- `gain`: accuracy under the condition minus the control, paired over the items both scored
  validly, with a paired bootstrap CI and the exact McNemar p-value (`metrics.paired_comparison`).
  An RM that ignores the user has gain ~0 whatever its accuracy;
- `length`: how often the RM picked the longer answer (decisive records), with the two-sided
  binomial p-value against 1/2, and the accuracy of the "pick the longer" rule on the same items
  (a length-only RM would score this);
- `position` (pairwise RMs): share of first-order verdicts "A", binomial p-value against 1/2;
  pointwise RMs score each answer alone, so they have no position to prefer (`applicable` false);
- `context_share`: share of records the RM was shown any user evidence for (posts or history);
  a gain on records scored without context cannot come from the user.
Runs finish in either order: whichever of the two finishes second writes the card. Both write
their summaries under one lock beside them (`settle`), so two runs finishing at once neither miss
the card nor put back a summary the other has just rewritten.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from prbench import metrics

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX systems: no OS lock
    fcntl = None  # type: ignore[assignment]

CONTROLS = {"profile": "wrong-profile", "history": "wrong-history", "persona": "wrong-persona"}
CARD_FIELD = "validity"
LOCK_FILE = ".validity.lock"  # beside the condition folders: hidden, so manifests and fingerprints skip it


def _binom(k: int, n: int) -> float | None:
    return float(stats.binomtest(k, n, 0.5).pvalue) if n else None


def length_control(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    valid = [r for r in records if r.get("credit") is not None]
    decisive = [r for r in valid if r.get("longer") in ("chosen", "rejected") and r["credit"] != 0.5]
    longer = sum((r["credit"] == 1.0) == (r["longer"] == "chosen") for r in decisive)
    rule = [1.0 if r.get("longer") == "chosen" else 0.0 if r.get("longer") == "rejected" else 0.5 for r in valid]
    return {"prefers_longer": longer / len(decisive) if decisive else None, "n": len(decisive),
            "p_value": _binom(longer, len(decisive)),
            "longer_rule_accuracy": float(np.mean(rule)) if rule else None}


def position_control(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    firsts = [r["verdicts"][0] for r in records if r.get("verdicts")]
    letters = [v for v in firsts if v in ("A", "B")]
    if not firsts:
        return {"applicable": False, "why": "pointwise RM: each answer is scored alone"}
    n_a = sum(v == "A" for v in letters)
    return {"applicable": True, "share_A": n_a / len(letters) if letters else None, "n": len(letters),
            "p_value": _binom(n_a, len(letters))}


def card(records: Sequence[dict[str, Any]], control: Sequence[dict[str, Any]], *, condition: str,
         control_condition: str, seed: int = 0, n_boot: int = 1000) -> dict[str, Any]:
    """The card for one condition run and its control run (module docstring)."""
    a = {r["id"]: r["credit"] for r in records if r.get("credit") is not None}
    b = {r["id"]: r["credit"] for r in control if r.get("credit") is not None}
    shared = sorted(a.keys() & b.keys())
    out: dict[str, Any] = {"condition": condition, "control": control_condition, "n_shared": len(shared)}
    if shared:
        res = metrics.paired_comparison(np.array([a[i] for i in shared]), np.array([b[i] for i in shared]),
                                        seed=seed, n_boot=n_boot)
        out["gain"] = {"diff": res["diff"], "ci_low": res["ci_low"], "ci_high": res["ci_high"],
                       "p_value": res["mcnemar_p"], "condition_accuracy": float(np.mean([a[i] for i in shared])),
                       "control_accuracy": float(np.mean([b[i] for i in shared]))}
    else:
        out["gain"] = None
    out["length"] = length_control(records)
    out["position"] = position_control(records)
    shown = [bool(r.get("posts_shown") or r.get("history_shown")) for r in records]
    out["context_share"] = float(np.mean(shown)) if shown else None
    return out


def _read(folder: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A sibling run's summary and records; (None, []) while it does not exist (yet)."""
    from prbench.runs import read_json, read_records

    summary, examples = folder / "summary.json", folder / "examples.jsonl"
    if not summary.is_file() or not examples.is_file():
        return None, []
    return read_json(summary, "rerun that eval to rewrite it"), read_records(examples)


@contextlib.contextmanager
def _pair_lock(folder: Path) -> Iterator[None]:
    """Hold the lock shared by every condition run below `folder` (blocking: held only while summaries are written)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644) if fcntl is not None else None
    except OSError:
        fd = None  # read-only media: nothing there is rewritten
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def settle(run: Any, summary: dict[str, Any], records: Sequence[dict[str, Any]], *, seed: int = 0,
           n_boot: int = 1000) -> None:
    """Write `run`'s summary, with the card put where it belongs (`attach`), under the pair's lock.

    Why the lock: each run writes its own summary before the other reads it, so the second to take
    the lock sees both; and the control never rewrites a condition summary that a rerun of the
    condition has replaced meanwhile.
    """
    condition = summary.get("condition")
    if condition not in CONTROLS and condition not in CONTROLS.values():
        run.write_summary(summary)
        return
    with _pair_lock(Path(run.path).parent):
        attach(run.path, summary, records, seed=seed, n_boot=n_boot)
        run.write_summary(summary)


def attach(run_dir: str | Path, summary: dict[str, Any], records: Sequence[dict[str, Any]], *,
           seed: int = 0, n_boot: int = 1000) -> Path | None:
    """Put the card where it belongs once both runs exist; returns the sibling summary it rewrote, if any.

    This run is a condition with its control beside it: the card goes into `summary` (written
    by the caller). This run is a control with its condition run beside it: the card goes into
    that run's summary.json, rewritten here.
    """
    from prbench.runs import write_json_atomic

    run_dir, condition = Path(run_dir), summary.get("condition")
    if condition in CONTROLS:
        _, control = _read(run_dir.parent / CONTROLS[condition])
        if control:
            summary[CARD_FIELD] = card(records, control, condition=condition, control_condition=CONTROLS[condition],
                                       seed=seed, n_boot=n_boot)
        return None
    for cond, ctrl in CONTROLS.items():
        if ctrl == condition:
            other, recs = _read(run_dir.parent / cond)
            if other is not None and recs:
                other[CARD_FIELD] = card(recs, records, condition=cond, control_condition=ctrl, seed=seed,
                                         n_boot=n_boot)
                write_json_atomic(run_dir.parent / cond / "summary.json", other)
                return run_dir.parent / cond
    return None
