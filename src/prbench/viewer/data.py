"""The viewer's data: every run below some paths, read by the checked reader, as one compact JSON object.

Why columnar: a view is a person x RM grid or a leaderboard over up to 100,000 judgments; one credit
character and two rounded scores per pair per run, keyed by a per-data-set pair index, keep the
bundle a few MB and let the browser aggregate without parsing one object per judgment. Every
statistic that `prbench compare` or meta reports is computed here, by their own functions, never in
the browser. A damaged run folder is one `skipped: FILE:LINE: ...` line in the data, shown on the page.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.errors import DataError, PrbenchError
from prbench.leaderboard import SETTINGS, RunConfig
from prbench.runkinds import Run, scan_runs
from prbench.runkinds.base import run_credits
from prbench.stats import metrics
from prbench.store.records import EvalSummary, PairwiseRecord, PointwiseRecord

log = logging.getLogger("prbench.viewer")
FORMAT = 1
COMPARE_SEED, COMPARE_BOOT = 0, 2000  # `prbench compare`'s defaults (cli/eval.py compare_cmd, leaderboard.compare_runs)
CREDIT_CHAR = {1.0: "1", 0.5: "h", 0.0: "0"}  # a pair with no valid credit is "-"
JUDGE_NOTES = ("raw", "rationale", "explanation", "reasoning", "output")  # record fields a judge may keep


class DataConfig(BaseModel):
    """What an eval run's config.json says about its data and what the RM was shown (the rest is ignored)."""

    model_config = ConfigDict(extra="ignore")
    data: str = ""
    split: str = "test"
    format: str | None = None
    data_digest: str | None = None
    top_k: int | None = None  # None: the CLI's default, 10 (a trained RM folder's own k is not recorded here)
    retriever: str | None = None  # None: bm25, the CLI's default
    seed: int = 0
    max_context_chars: int | None = None

    @property
    def k(self) -> int:
        return 10 if self.top_k is None else self.top_k

    @property
    def ranker(self) -> str:
        return self.retriever or "bm25"


class TrainedUsers(BaseModel):
    """Training people a trained RM folder names (heads: config `users`; PAL: `train_users` less `adapted_users`;
    fine-tuned: prbench_rm.json `users`)."""

    model_config = ConfigDict(extra="ignore")
    users: list[str] | dict[str, Any] = []
    train_users: list[str] = []
    adapted_users: list[str] = []

    def seen(self) -> set[str]:
        return (set(self.users) - set(self.adapted_users)) | set(self.train_users)


def trained_users(spec: str) -> list[str] | None:
    """The people an RM was trained on, read from its folder (`kind:DIR`); None where the RM names none.

    Why here: eval runs record only how many training people there were (`model_info.trained_users`),
    not who; the RM folder is the one place that says."""
    folder = Path(spec.partition(":")[2] or spec)
    if not folder.is_dir():
        return None
    seen: set[str] = set()
    found = False
    for name in ("config.json", "prbench_rm.json"):
        f = folder / name
        if f.is_file():
            try:
                seen |= TrainedUsers.model_validate_json(f.read_text(encoding="utf-8")).seen()
                found = True
            except (ValidationError, OSError, UnicodeDecodeError):
                continue  # a config of another shape (a plain HF model): it names no training people
    return sorted(seen) if found and seen else None


def shown_as(cfg: DataConfig) -> str:
    return f"top_k={cfg.k}, retriever={cfg.ranker}, seed={cfg.seed}"


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def _profile_item(p: Any) -> dict[str, Any]:
    """A profile item as the page shows it: t text, s stance (a verdict), p/r the past choice's prompt and rejected."""
    out: dict[str, Any] = {"t": p.text}
    for key, value in (("s", p.stance), ("p", p.prompt), ("r", p.rejected), ("c", p.category or None)):
        if value:
            out[key] = value
    return out


class _Texts:
    """The pairs' texts of one data set and what the RMs were shown, rebuilt by `prbench.context.conditions`."""

    def __init__(self, cfg: DataConfig) -> None:
        from prbench.data import load_examples
        from prbench.fingerprint import data_digest

        if cfg.data_digest is not None and data_digest(cfg.data) not in (None, cfg.data_digest):
            raise PrbenchError(f"data {cfg.data!r} changed since the runs were made (digest differs): "
                               "pair texts are not shown")
        self.examples = {ex.id: ex for ex in load_examples(cfg.data, "benchmark", split=cfg.split, format=cfg.format)}
        self.cfg = cfg
        self.retriever: Any = None

    def shown(self, ex: Any, condition: str) -> tuple[str, list[int]]:
        """(whose profile, indices of its items in the order shown) under `condition` (profile, wrong-profile)."""
        from prbench.context.conditions import build_view
        from prbench.context.retrieval import load_retriever

        if self.retriever is None:
            self.retriever = load_retriever(self.cfg.ranker)
        view = build_view(ex, condition, retriever=self.retriever, top_k=self.cfg.k,
                          pool=list(self.examples.values()), seed=self.cfg.seed,
                          max_context_chars=self.cfg.max_context_chars)
        owner = self.examples[view.meta["donor"]] if "donor" in view.meta else ex
        index = {p.id: i for i, p in enumerate(owner.profile)}
        return str(owner.user_id or owner.id), [index[p.id] for p in view.posts[: view.shown_posts] if p.id in index]


class _Dataset:
    """One data set's pairs (an index per pair id), people and categories, filled as runs are read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ids: list[str] = []
        self.at: dict[str, int] = {}
        self.users: list[str] = []
        self.user_at: dict[str, int] = {}
        self.user: list[int] = []
        self.cats: list[str] = []
        self.cat: list[int] = []
        self.cfg: DataConfig | None = None
        self.shown_as: set[str] = set()  # every (top_k, retriever, seed) the runs of this data set used
        self.seen: dict[str, list[str]] = {}  # spec -> training people

    def _uid(self, u: str) -> int:
        if u not in self.user_at:
            self.user_at[u] = len(self.users)
            self.users.append(u)
        return self.user_at[u]

    def index(self, rec: Any) -> int:
        if rec.id not in self.at:
            self.at[rec.id] = len(self.ids)
            self.ids.append(rec.id)
            extra = rec.model_extra or {}
            self.user.append(self._uid(str(extra["user_id"]) if "user_id" in extra else "?"))
            cat = rec.category or "?"
            if cat not in self.cats:
                self.cats.append(cat)
            self.cat.append(self.cats.index(cat))
        return self.at[rec.id]

    def texts(self) -> dict[str, Any]:
        """Question, answers and profiles as the RMs saw them; {"note": why} where the data cannot be read."""
        if self.cfg is None:
            return {"note": "no run names its data"}
        try:
            src = _Texts(self.cfg)
        except (PrbenchError, OSError, ValueError) as exc:
            return {"note": f"pair texts not shown: {str(exc).splitlines()[0][:300]}"}
        pairs: list[dict[str, Any] | None] = []
        profiles: dict[str, list[dict[str, Any]]] = {}
        people: dict[str, int] = {}
        for pid in self.ids:
            ex = src.examples.get(pid)
            if ex is None:
                pairs.append(None)
                continue
            row: dict[str, Any] = {"q": ex.question, "c": ex.chosen, "r": ex.rejected}
            for cond, key in (("profile", "p"), ("wrong-profile", "w")):
                try:
                    owner, idx = src.shown(ex, cond)
                except (PrbenchError, KeyError) as exc:
                    row[key + "x"] = str(exc).splitlines()[0][:200]
                    continue
                row[key] = [owner, idx]
                if owner not in profiles:
                    donor = ex if owner == (ex.user_id or ex.id) else next(
                        e for e in src.examples.values() if (e.user_id or e.id) == owner)
                    profiles[owner] = [_profile_item(p) for p in donor.profile]
            pairs.append(row)
            people.setdefault(ex.user_id or ex.id, len(ex.profile))
        shown = shown_as(src.cfg)
        others = sorted(self.shown_as - {shown})
        return {"pairs": pairs, "profiles": profiles, "size": people, "shown_as": shown,
                **({"shown_note": f"other runs of this data set used {'; '.join(others)}: their RMs saw another "
                                  "cut of the profile"} if others else {})}

    def dump(self) -> dict[str, Any]:
        return {"ids": self.ids, "users": self.users, "user": self.user, "cats": self.cats, "cat": self.cat,
                "seen": self.seen, **self.texts()}


def _eval_row(run: Run, ds: _Dataset, i: int) -> dict[str, Any]:
    s = run.summary_as(EvalSummary)
    m = s.metrics
    cfg = RunConfig.model_validate(run.config)
    n = len(ds.ids)
    credit = ["-"] * n
    sc: list[float | None] = [None] * n
    sr: list[float | None] = [None] * n
    judge: dict[int, dict[str, Any]] = {}
    for rec in run.items:
        k = ds.index(rec)
        while len(credit) <= k:
            credit.append("-")
            sc.append(None)
            sr.append(None)
        credit[k] = CREDIT_CHAR[rec.credit] if rec.credit is not None else "-"
        if isinstance(rec, PointwiseRecord):
            sc[k], sr[k] = _r(rec.score_chosen), _r(rec.score_rejected)
        elif isinstance(rec, PairwiseRecord):
            notes = {f: str(v)[:2000] for f, v in (rec.model_extra or {}).items() if f in JUDGE_NOTES and v}
            judge[k] = {"pos": rec.chosen_position, "v": rec.verdicts, "sides": rec.sides, **notes}
        if rec.invalid:
            judge.setdefault(k, {})["invalid"] = rec.invalid
    row: dict[str, Any] = {
        "i": i, "kind": "eval", "path": str(run.path), "data": s.data, "model": s.model, "spec": s.rm,
        "cond": s.condition, "acc": m.accuracy, "lo": m.ci_low, "hi": m.ci_high, "n": m.n, "n_invalid": m.n_invalid,
        "n_total": s.n_total, "options": cfg.model_options, "settings": {k: getattr(cfg, k) for k in SETTINGS},
        "credit": "".join(credit), "cats": {c: g.accuracy for c, g in (m.categories.groups if m.categories else {}).items()},
    }
    if any(v is not None for v in sc):
        row["sc"], row["sr"] = sc, sr
    if judge:
        row["judge"] = {str(k): v for k, v in judge.items()}
    if s.cost is not None:
        row["cost"] = {"usd": s.cost.usd, "in": s.cost.input_tokens, "out": s.cost.output_tokens,
                       "requests": s.cost.requests}
    if s.sequential is not None:
        row["stop"] = {"rule": s.sequential.rule, "used": s.sequential.n_used, "of": s.sequential.n_items,
                       "why": s.sequential.stopped}
    if s.validity is not None and s.validity.gain is not None:
        g = s.validity.gain
        row["gain"] = {"control": s.validity.control, "diff": g.diff, "lo": g.ci_low, "hi": g.ci_high, "p": g.p_value}
    return row


def _compare(rows: Sequence[dict[str, Any]], runs: dict[int, Run]) -> dict[str, dict[str, Any]]:
    """`prbench compare A B` for every two eval runs of one data set under one condition, A listed first.

    The same steps as `prbench.leaderboard.compare_runs` (the items both scored validly, sorted by id;
    `metrics.paired_comparison` at compare's seed and n_boot), on the runs already read."""
    out = {}
    for a, b in itertools.combinations(rows, 2):
        if a["data"] != b["data"] or a["cond"] != b["cond"]:
            continue
        ca, cb = run_credits(runs[a["i"]]), run_credits(runs[b["i"]])
        shared = sorted(ca.keys() & cb.keys())
        if not shared:
            continue
        res = metrics.paired_comparison(np.array([ca[k] for k in shared]), np.array([cb[k] for k in shared]),
                                        seed=COMPARE_SEED, n_boot=COMPARE_BOOT)
        out[f"{a['i']}-{b['i']}"] = {"n_shared": len(shared), "only_a": len(ca.keys() - cb.keys()),
                                     "only_b": len(cb.keys() - ca.keys()), **res}
    return out


def _other_row(run: Run, i: int) -> dict[str, Any]:
    """A downstream, generation or build run: its label, RM, the curve where it has one, and its summary's numbers."""
    row: dict[str, Any] = {"i": i, "kind": run.kind.name, "title": run.kind.title or run.kind.name,
                           "path": str(run.path), "rm": run.key, "cond": run.names.condition,
                           "label": run.kind.label(run), "role": run.kind.role}
    if run.downstream is not None:
        d = run.downstream
        row.update(k=d.k, expected=d.expected, first_k=d.first_k, lo=d.ci_low, hi=d.ci_high, grader=d.grader,
                   n_items=d.n_items, scale=d.scale)
    if run.typed is not None:
        flat = {k: v for k, v in run.typed.model_dump(mode="json").items()
                if isinstance(v, (int, float, str, bool)) and k not in ("format", "run")}
        row["summary"] = flat
    return row


def _meta(paths: Sequence[str | Path], scan: Any) -> dict[str, Any]:
    """Meta's rank agreement (benchmark vs downstream) with its CIs, by `prbench.meta`, where both kinds of run exist."""
    if not scan.of("benchmark") or not scan.of("downstream"):
        return {}
    from prbench.meta import PAPER_COLUMNS, main_rows, meta_evaluate

    try:
        res = meta_evaluate(paths, paths, scanned=scan)
    except (PrbenchError, ValueError) as exc:  # too few RMs, no shared items: the page says why
        return {"note": f"meta-evaluation not shown: {str(exc).splitlines()[0]}"}
    rows = [{"benchmark": r.benchmark.label, "setting": r.setting.label, "n_rms": r.n_rms,
             "metrics": {label: r.metrics[name].model_dump() for name, label in PAPER_COLUMNS} if r.metrics else {},
             "note": r.note} for r in main_rows(res)]
    return {"rows": rows, "columns": [label for _, label in PAPER_COLUMNS]}


def collect(paths: Sequence[str | Path], *, with_meta: bool = True) -> dict[str, Any]:
    """Everything the viewer shows, from the runs at or below `paths`."""
    skipped: list[str] = []
    scan = scan_runs(paths, warn=lambda line: None)
    skipped.extend(scan.skipped)
    datasets: dict[str, _Dataset] = {}
    evals: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    by_index: dict[int, Run] = {}
    for run in scan.runs:
        i = len(evals) + len(others)
        try:
            if run.kind.role == "benchmark":
                s = run.summary_as(EvalSummary)
                ds = datasets.setdefault(s.data, _Dataset(s.data))
                cfg = DataConfig.model_validate(run.config)
                if ds.cfg is None:
                    ds.cfg = cfg
                if s.condition in ("profile", "wrong-profile"):
                    ds.shown_as.add(shown_as(cfg))
                row = _eval_row(run, ds, i)
                if s.rm not in ds.seen and (seen := trained_users(s.rm)) is not None:
                    ds.seen[s.rm] = seen
                evals.append(row)
                by_index[i] = run
            else:
                others.append(_other_row(run, i))
        except (DataError, ValidationError, PrbenchError) as exc:
            where = run.path / "config.json" if isinstance(exc, ValidationError) else ""
            skipped.append(f"skipped: {where}{': ' if where else ''}{str(exc).splitlines()[0]}")
    for row in evals:  # runs read before a later run added pairs: pad to the data set's length
        n = len(datasets[row["data"]].ids)
        row["credit"] = row["credit"].ljust(n, "-")
        for key in ("sc", "sr"):
            if key in row:
                row[key] = row[key] + [None] * (n - len(row[key]))
    return {"format": FORMAT, "skipped": skipped, "notes": list(dict.fromkeys(scan.notes)),
            "runs": evals, "others": others, "datasets": {k: d.dump() for k, d in datasets.items()},
            "compare": _compare(evals, by_index), "meta": _meta(paths, scan) if with_meta else {}}


def to_js(data: dict[str, Any]) -> str:
    """data.js: the data as a global (a page opened from file:// may not fetch a local JSON file in Chromium)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return "window.PRBENCH_VIEW=" + text.replace("</", "<\\/") + ";\n"
