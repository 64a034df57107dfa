"""The validation report: the paper's human-validation table, computed from the validator's scores.

Per category (and over all): mean and range of each scale for chosen and rejected, the
chosen-minus-rejected gap (rubric fit is the one that should be large), kept/dropped counts with
reasons, length statistics, and how often answers were regenerated, truncated or unreadable.
The same table code renders the human table of `build agreement`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from prbench.build.filter import REASONS, FilterRule, length_ratio
from prbench.build.validate import SCALES
from prbench.schema import CATEGORY_SHORT

ALL = "all"


def describe(values: Sequence[float]) -> dict[str, float] | None:
    """mean, min, max and n of a list (None when empty), rounded for reading."""
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {"mean": round(float(a.mean()), 4), "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


def scale_table(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> dict[str, Any]:
    """For (chosen scores, rejected scores) pairs: per scale, each side described and the mean gap."""
    out: dict[str, Any] = {}
    for s in SCALES:
        c = [p[0][s] for p in pairs if p[0].get(s) is not None]
        r = [p[1][s] for p in pairs if p[1].get(s) is not None]
        gaps = [p[0][s] - p[1][s] for p in pairs if p[0].get(s) is not None and p[1].get(s) is not None]
        out[s] = {"chosen": describe(c), "rejected": describe(r),
                  "gap": round(float(np.mean(gaps)), 4) if gaps else None}
    return out


def length_stats(words: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Word counts of chosen and rejected, their max/min ratio, and how often chosen is longer."""
    if not words:
        return {"n": 0}
    ratios = [length_ratio(c, r) for c, r in words]
    return {
        "n": len(words),
        "chosen_words": describe([c for c, _ in words]),
        "rejected_words": describe([r for _, r in words]),
        "ratio": describe(ratios),
        "chosen_longer": round(sum(c > r for c, r in words) / len(words), 4),
    }


def _section(records: Sequence[Mapping[str, Any]], decisions: Mapping[str, list[str]]) -> dict[str, Any]:
    kept = [r for r in records if not decisions[r["id"]]]
    dropped = [r for r in records if decisions[r["id"]]]
    validated = [r for r in records if _scores(r) is not None]
    first = Counter(decisions[r["id"]][0] for r in dropped)
    every = Counter(reason for r in dropped for reason in decisions[r["id"]])
    gen: dict[str, Any] = {"regenerated": {}, "truncated": {}}
    for role in ("chosen", "rejected"):
        gen["regenerated"][role] = sum(bool(r[role].get("regenerated")) for r in records)
        gen["truncated"][role] = sum(bool(r[role].get("truncated")) for r in records)
    gen["failed"] = sum(1 for r in records if r["chosen"].get("error") or r["rejected"].get("error"))
    vals = [v for r in records for v in (r.get("validation") or {}).values()]
    return {
        "processed": len(records),
        "kept": len(kept),
        "dropped": len(dropped),
        "dropped_by_reason": {k: first[k] for k in REASONS if first.get(k)},
        "failed_checks": {k: every[k] for k in REASONS if every.get(k)},
        "scales_kept": scale_table(_all_scores(kept)),
        "scales_validated": scale_table(_all_scores(validated)),
        "length_kept": length_stats([(r["chosen"]["words"], r["rejected"]["words"]) for r in kept]),
        "generation": gen,
        "validation": {
            "answers_scored": sum(1 for v in vals if v.get("scores")),
            "parse_failures": sum(int(v.get("parse_failures", 0)) for v in vals),
            "retried": sum(1 for v in vals if v.get("attempts", 1) > 1),
            "unreadable": sum(1 for v in vals if not v.get("scores")),
        },
    }


def _scores(rec: Mapping[str, Any]) -> tuple[dict, dict] | None:
    v = rec.get("validation") or {}
    c, r = (v.get("chosen") or {}).get("scores"), (v.get("rejected") or {}).get("scores")
    return (c, r) if c and r else None


def _all_scores(recs: Sequence[Mapping[str, Any]]) -> list[tuple[dict, dict]]:
    """The validator's (chosen, rejected) scores of records that have both."""
    return [s for s in map(_scores, recs) if s is not None]


def build_report(
    records: Sequence[Mapping[str, Any]],
    decisions: Mapping[str, list[str]],
    rule: FilterRule,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report as JSON-ready data: per category sections, an `all` section, the rule and meta."""
    cats = sorted({r["category"] for r in records})
    return {
        **dict(meta or {}),
        "rule": rule.as_dict(),
        "rule_text": rule.describe(),
        "categories": {c: _section([r for r in records if r["category"] == c], decisions) for c in cats},
        ALL: _section(records, decisions),
    }


def _num(v: float) -> str:
    return f"{v:g}" if float(v).is_integer() else f"{v:.2f}"


def _fmt(d: Mapping[str, float] | None) -> str:
    if not d:
        return "-"
    return f"{d['mean']:.2f} ({_num(d['min'])}-{_num(d['max'])})"


def scales_markdown(
    columns: Mapping[str, Mapping[str, Any]], extra_rows: Sequence[tuple[str, list[str]]] = ()
) -> str:
    """A paper-style table: one row per scale, chosen/rejected columns per category."""
    names = [CATEGORY_SHORT.get(c, c) for c in columns]
    head = ["dimension"] + [f"{n} {side}" for n in names for side in ("chosen", "rejected")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in SCALES:
        cells = [s.replace("_", " ")]
        for table in columns.values():
            cells += [_fmt(table[s]["chosen"]), _fmt(table[s]["rejected"])]
        lines.append("| " + " | ".join(cells) + " |")
    gap = ["rubric-fit gap (chosen - rejected)"]
    for table in columns.values():
        g = table["rubric_fit"]["gap"]
        gap += ["-" if g is None else f"{g:.2f}", ""]
    lines.append("| " + " | ".join(gap) + " |")
    for label, cells in extra_rows:
        row = [label]
        for c in cells:
            row += [c, ""]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def report_markdown(report: Mapping[str, Any]) -> str:
    """The report as markdown: scale table, drop reasons, length and generation statistics."""
    secs = {**report["categories"], ALL: report[ALL]}
    names = [CATEGORY_SHORT.get(c, c) for c in secs]
    tables = {c: s["scales_kept"] for c, s in secs.items()}
    extra = [
        ("kept / processed", [f"{s['kept']} / {s['processed']}" for s in secs.values()]),
        ("words chosen", [_fmt(s["length_kept"].get("chosen_words")) for s in secs.values()]),
        ("words rejected", [_fmt(s["length_kept"].get("rejected_words")) for s in secs.values()]),
        ("length ratio max/min", [_fmt(s["length_kept"].get("ratio")) for s in secs.values()]),
    ]
    out = [f"Validator scores of kept pairs, 1-5, mean (min-max). Filter: {report['rule_text']}.", "",
           scales_markdown(tables, extra), "", "Dropped pairs by first failing check:", ""]
    out += ["| reason | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for reason in REASONS:
        counts = [s["dropped_by_reason"].get(reason, 0) for s in secs.values()]
        if any(counts):
            out.append(f"| {reason} | " + " | ".join(str(c) for c in counts) + " |")
    out.append("| total dropped | " + " | ".join(str(s["dropped"]) for s in secs.values()) + " |")
    out += ["", "Generation and validation:", "", "| event | " + " | ".join(names) + " |",
            "|" + "---|" * (len(names) + 1)]
    rows = [
        ("chosen regenerated (over word limit)", lambda s: s["generation"]["regenerated"]["chosen"]),
        ("rejected regenerated (over word limit)", lambda s: s["generation"]["regenerated"]["rejected"]),
        ("chosen truncated at a sentence boundary", lambda s: s["generation"]["truncated"]["chosen"]),
        ("rejected truncated at a sentence boundary", lambda s: s["generation"]["truncated"]["rejected"]),
        ("generation failed", lambda s: s["generation"]["failed"]),
        ("unreadable validator replies (all attempts counted)", lambda s: s["validation"]["parse_failures"]),
        ("answers re-validated after an unreadable reply", lambda s: s["validation"]["retried"]),
        ("answers left without scores", lambda s: s["validation"]["unreadable"]),
    ]
    for label, get in rows:
        out.append(f"| {label} | " + " | ".join(str(get(s)) for s in secs.values()) + " |")
    return "\n".join(out) + "\n"
