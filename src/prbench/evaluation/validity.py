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
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from prbench.stats import metrics
from prbench.store.records import EvalSummary, PairwiseRecord, PointwiseRecord

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - Windows has no fcntl: no OS lock
    fcntl = None

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
    from prbench.store.runs import read_json, read_records

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
    from prbench.store.runs import write_json_atomic

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


# -- what keeps a number from being named best (readers: eval's table, leaderboard, report, EEE export) ------------
CONSTANT_SHARE = 0.95  # one letter on at least this share of first-order verdicts: the answer ignores the pair
TIE_SHARE = 0.5  # at least half the validly scored pairs tied: the RM does not separate the answers
MIN_ITEMS = 5  # fewer verdicts say nothing about a constant answer


@dataclass(frozen=True)
class People:
    """Who a trained RM's number is about: the people it was trained on (seen) and the others (unseen)."""

    seen: int
    unseen: int
    seen_accuracy: float | None  # over the seen people's pairs
    unseen_accuracy: float | None

    @property
    def share(self) -> float:
        """The share of the run's people the RM was trained on."""
        return self.seen / (self.seen + self.unseen) if self.seen + self.unseen else 0.0

    def text(self) -> str:
        """'seen people 40 of 40 (100%): 96.0; unseen: none' (accuracies in %, over each part's pairs)."""
        def acc(x: float | None) -> str:
            return "-" if x is None else f"{100 * x:.1f}"
        unseen = f"unseen {self.unseen}: {acc(self.unseen_accuracy)}" if self.unseen else "unseen: none"
        return (f"seen people {self.seen} of {self.seen + self.unseen} ({100 * self.share:.0f}%): "
                f"{acc(self.seen_accuracy)}; {unseen}")


def people(s: EvalSummary) -> People | None:
    """Seen vs unseen people of a run, where the RM knows whom it was trained on (None otherwise)."""
    pu = s.per_user
    if pu is None or pu.seen is None or pu.unseen is None:
        return None
    return People(pu.seen.n_users, pu.unseen.n_users, pu.seen.pair_accuracy, pu.unseen.pair_accuracy)


def faults(s: EvalSummary, items: Sequence[PointwiseRecord | PairwiseRecord] | None = None) -> list[str]:
    """Why a run's accuracy must not be named best, in words (empty: no reason found).

    Each is a failure of the run's validity, not a low score: people the RM was trained on (a training
    person's score is no estimate for anyone new), one letter answered whatever the pair (a judge saying "A"
    to every item scores the share of pairs whose chosen answer came first), picks that agree with the labels
    no more than chance (Cohen's kappa of the position picked vs the chosen answer's position <= 0; needs the
    records), and ties on most pairs. With `items`, counts come from the records, else from the summary.
    """
    out = []
    who = people(s)
    if who is not None and who.seen:
        out.append(f"trained on {who.seen} of its {who.seen + who.unseen} people")
    pw = s.metrics.pairwise
    firsts = [r.verdicts[0] for r in items or () if isinstance(r, PairwiseRecord) and r.verdicts]
    letters = [v for v in firsts if v in ("A", "B")]
    share_a = (sum(v == "A" for v in letters) / len(letters) if letters else None) if items is not None \
        else pw.share_verdict_A if pw is not None else None
    n_letters = len(letters) if items is not None else s.metrics.n
    if share_a is not None and n_letters >= MIN_ITEMS and max(share_a, 1 - share_a) >= CONSTANT_SHARE:
        letter, share = ("A", share_a) if share_a >= 0.5 else ("B", 1 - share_a)
        out.append(f'answers "{letter}" on {100 * share:.0f}% of {n_letters} items')
    shown = [(r.verdicts[0], r.chosen_position) for r in items or ()
             if isinstance(r, PairwiseRecord) and r.verdicts and r.verdicts[0] in ("A", "B")]
    if len(shown) >= MIN_ITEMS:
        kappa = metrics.cohen_kappa([v for v, _ in shown], [c for _, c in shown])
        if kappa is not None and kappa <= 0.0:
            out.append(f"kappa {kappa:.2f} with the labels")
    credits = [r.credit for r in items or () if r.credit is not None]
    ties, n = (sum(c == 0.5 for c in credits), len(credits)) if items is not None else (s.metrics.ties, s.metrics.n)
    if ties is not None and n and ties / n >= TIE_SHARE:
        out.append(f"ties on {100 * ties / n:.0f}% of {n} pairs")
    return out
