"""Which method `prbench train --data D --out DIR` trains: cross-validation over the people of D.

The design (issue #47):

- folds by person: the people of D in a seeded shuffle, cut into k folds (`folds_for`: 5, or
  half the people when fewer than 10; at least 4 people); every person is held out once;
- per fold, every candidate trains on the other folds' people and scores each held-out pair twice
  (k = 0: no shots), each time on the views its folder asks for (`view_top_k`, as `prbench eval`
  reads it): with the person's own profile, and with a stranger's (`stranger_pairs`: another
  held-out person's profile, of the same category where there is one, holding neither answer);
- the number is mirrored accuracy: per pair (own credit + 1 - stranger's credit) / 2, i.e. the
  pair judged as the person did and, in reverse, by a stranger standing for someone who chose the
  other way; per person its mean (ties 0.5, invalid scores left out and counted), pooled over every
  held-out person. Why mirrored: on a file that is not mirrored, what a method reads off the pair
  alone (a popular statement wins) scores as accuracy on unseen people, and that chose `style` (at
  chance on polis-dev's mirrored test) over `stance` (62-65%) once stance stopped reading
  popularity (measured on 220-person subsets, issue #47). Mirrored, a profile-blind method reads
  exactly 50%, as on polis-dev's test file and the issue's held-out checks; the own-profile
  accuracy and the stranger's are shown beside it;
- the choice: the candidate with the best mirrored mean over people, unless a cheaper one (`Method.cost`)
  is within `margin` of it (default 1 point): then the cheapest of those. No significance test
  decides: on a few hundred people one has no power, and "not significantly better" kept a
  method at chance while another read 60-68% (issue #47);
- how sure: the mean over people with a bootstrap CI over people, the spread over folds, and
  the probability that each candidate is the best (paired bootstrap over the people every
  candidate scored). When the data cannot rule out that another candidate is better than the
  chosen one by more than the margin, the result says so (`warning`) and what was done;
- the reference rule (`covote-nn`, `prbench.train.covote`: trains nothing) is measured in the
  same folds and shown as a row, never chosen: it shows whether a trained method beats it;
- a time budget bounds the folds: after each fold, the next is run only when it fits (at least
  one fold always runs); what was cut is said and recorded.

Folds are interleaved (fold 1 of every candidate, then fold 2 ...), so a cut budget leaves every
candidate measured on the same people.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from prbench.data.pairs import PreferencePair, users_of
from prbench.errors import PrbenchError
from prbench.stats import metrics
from prbench.store.cache import Cache

REFERENCES = ("covote-nn",)
MARGIN = 0.01  # a cheaper method within 1 point of the best is kept
SURE = 0.9  # below this probability that the chosen one is best, the result warns


class CVSettings(BaseModel):
    """How the recommendation cross-validates (one object: the CLI's options, recorded in protocol.json)."""

    folds: int | None = Field(default=None, ge=2, description="k; None: `folds_for` the number of people")
    margin: float = Field(default=MARGIN, ge=0, le=1, description="a cheaper method within this of the best wins")
    budget_s: float | None = Field(default=None, gt=0, description="wall-clock seconds the folds may take")
    seed: int = 0
    n_boot: int = Field(default=1000, ge=10)
    sure: float = Field(default=SURE, gt=0, le=1, description="P(chosen is best) below which the result warns")
    references: tuple[str, ...] = REFERENCES


class Candidate(BaseModel):
    """One method measured in the folds: its people's accuracy pooled over folds, and what it cost."""

    method: str
    cost: float
    reference: bool = False  # a reference rule: shown beside the candidates, never chosen
    top_k: int | None = None  # the views it was scored on (profile items shown)
    n_people: int = 0  # held-out people it scored validly
    n_invalid: int = 0  # held-out pairs with an invalid score, or no stranger to mirror them (left out)
    mean: float | None = None  # mirrored accuracy: mean over the people every candidate scored (the choice)
    ci_low: float | None = None
    ci_high: float | None = None
    fold_means: list[float] = []
    fold_sd: float | None = None
    train_seconds: float = 0.0  # all folds
    p_best: float | None = None  # paired bootstrap over people (candidates only)
    profile_mean: float | None = None  # accuracy with the person's own profile (what an unmirrored test reads)
    wrong_mean: float | None = None  # accuracy with a stranger's profile: what the pair alone tells
    error: str | None = None
    per_person: dict[str, float] = {}  # person -> mirrored accuracy
    own_profile: dict[str, float] = {}  # person -> accuracy with their own profile
    wrong_profile: dict[str, float] = {}  # person -> accuracy with a stranger's profile


class Recommendation(BaseModel):
    """The recommendation by cross-validation over people: what was run, measured and chosen, and why."""

    method: str
    why: str
    settings: CVSettings
    folds: int
    folds_rule: str
    folds_run: int
    cut: str | None = None  # what the time budget cut
    people: int  # people in the data
    scored_people: int  # held-out people every candidate scored: what the choice rests on
    candidates: list[Candidate]
    references: list[Candidate]
    runner_up: str | None = None
    gap: float | None = None  # runner-up minus chosen, per person, mean
    gap_ci: tuple[float | None, float | None] | None = None
    warning: str | None = None
    reference_note: str | None = None  # a reference rule scored at least as well as the chosen method
    folds_of: dict[str, int] = {}  # person -> fold

    def row(self, method: str) -> Candidate:
        return next(c for c in self.candidates + self.references if c.method == method)


def folds_for(people: int) -> tuple[int, str]:
    """k and the rule that gave it: 5 folds (each trains on 80% of the people), or half the people
    (2 held out per fold) when fewer than 10; fewer than 4 people cannot be cross-validated."""
    if people < 4:
        raise PrbenchError(f"the recommendation needs at least 4 users to cross-validate, got {people}")
    if people >= 10:
        return 5, f"5 folds for {people} people (each fold trains on about 80% of them)"
    return people // 2, f"{people // 2} folds for {people} people (2 held out per fold)"


def assign_folds(pairs: Sequence[PreferencePair], k: int, seed: int) -> dict[str, int]:
    """Person -> fold, a seeded shuffle of the sorted people cut into k near-equal parts (order-free)."""
    people = sorted(users_of(pairs))
    random.Random(f"{seed}:cv-people").shuffle(people)
    return {u: i % k for i, u in enumerate(people)}


def p_best(acc: np.ndarray, *, seed: int, n_boot: int) -> np.ndarray:
    """P(each column has the highest mean), people resampled with replacement (paired: one draw of
    people for all columns); an exact tie splits its share."""
    n = acc.shape[0]
    rng = np.random.default_rng([seed, 47])
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)  # (n_boot, n) counts of each person
    means = weights @ acc / n
    top = means == means.max(axis=1, keepdims=True)
    return (top / top.sum(axis=1, keepdims=True)).mean(axis=0)


def stranger_pairs(held: Sequence[PreferencePair], seed: int) -> list[PreferencePair | None]:
    """Each pair shown with a stranger's profile (None where no one qualifies): another person of `held`,
    of the pair's category where one is, whose profile holds neither answer of the pair (else their
    own judgment of it would be read); drawn reproducibly from (seed, pair)."""
    from prbench.train.covote import text_key

    profiles: dict[str, PreferencePair] = {}
    for p in held:
        profiles.setdefault(p.user_id, p)
    texts = {u: {text_key(t) for x in p.profile for t in (x.text, x.rejected) if t} for u, p in profiles.items()}
    people = sorted(u for u, p in profiles.items() if p.profile)
    out: list[PreferencePair | None] = []
    for p in held:
        answers = {text_key(p.chosen), text_key(p.rejected)}
        ok = [u for u in people if u != p.user_id and not answers & texts[u]]
        pool = [u for u in ok if profiles[u].category == p.category] or ok
        if not pool:
            out.append(None)
            continue
        donor = profiles[random.Random(f"{seed}:stranger:{p.key}").choice(pool)]
        out.append(p.model_copy(update={"id": f"{p.key}~stranger", "profile": list(donor.profile)}))
    return out


def _measure(name: str, train: list[PreferencePair], held: list[PreferencePair], options: dict[str, Any],
             cache: Cache | None, seed: int) -> tuple[dict[str, float], dict[str, float], dict[str, float], int,
                                                      float, int | None]:
    """Train `name` on `train`; per held-out person: mirrored accuracy, own-profile and stranger's-profile
    accuracy (module doc), on the candidate's own views."""
    from prbench.rewards import load_rm
    from prbench.rewards.base import DEFAULT_TOP_K, view_top_k
    from prbench.train.methods import METHODS, _rm_options, make_config, options_for, spec_for
    from prbench.train.protocol import ProtocolConfig, pair_credits, per_user

    cfg = make_config(name, options_for(name, options))
    fn, _ = METHODS[name].load()
    scratch = Path(tempfile.mkdtemp(prefix=f"prbench-cv-{name}-"))
    try:
        start = time.perf_counter()
        fn(train, scratch / "model", cfg, cache=cache)
        seconds = time.perf_counter() - start
        rm = load_rm(spec_for(name, scratch / "model"), **_rm_options(name, cache))
        top_k = view_top_k(rm) or getattr(cfg, "top_k", None) or DEFAULT_TOP_K
        pcfg = ProtocolConfig(condition="profile", top_k=top_k, seed=seed)
        own, owners = pair_credits(rm, held, "profile", pcfg)
        strangers = stranger_pairs(held, seed)
        idx = [i for i, q in enumerate(strangers) if q is not None]
        got, _ = pair_credits(rm, [q for q in strangers if q is not None], "profile", pcfg)
        other: list[float | None] = [None] * len(held)
        for i, c in zip(idx, got):
            other[i] = c
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mirrored = [None if c is None or o is None else (c + 1 - o) / 2 for c, o in zip(own, other)]
    return (per_user(mirrored, owners), per_user(own, owners), per_user(other, owners),
            sum(c is None for c in mirrored), seconds, top_k)


def recommend(pairs: Sequence[PreferencePair], candidates: Sequence[str] | None = None,
              options: dict[str, Any] | None = None, *, settings: CVSettings | None = None,
              cache: Cache | None = None, progress: Any = None) -> Recommendation:
    """Cross-validate the candidates (and the reference rules) over the people of `pairs`; choose (module doc).

    `progress(line)` is told each fold as it ends. Fewer than 4 people: a PrbenchError (the CLI
    falls back to DEFAULT_METHOD and says so)."""
    from prbench.train.methods import METHODS

    options = dict(options or {})
    cv = settings or CVSettings(seed=int(options.get("seed") or 0))
    names = list(dict.fromkeys(candidates or [m.name for m in METHODS.methods() if m.recommend]))
    refs = [r for r in cv.references if r not in names]
    for name in names + refs:
        if name not in METHODS:
            raise PrbenchError(METHODS.unknown(name))
    people = users_of(pairs)
    k, rule = folds_for(len(people))
    if cv.folds is not None:
        if cv.folds > len(people):
            raise PrbenchError(f"--folds {cv.folds}: more folds than the {len(people)} people of the data")
        k, rule = cv.folds, f"{cv.folds} folds (given) for {len(people)} people"
    fold_of = assign_folds(pairs, k, cv.seed)
    rows = {n: Candidate(method=n, cost=METHODS[n].cost, reference=n in refs) for n in names + refs}
    start, run, cut = time.perf_counter(), 0, None
    for fold in range(k):
        elapsed = time.perf_counter() - start
        if cv.budget_s is not None and run and elapsed + elapsed / run > cv.budget_s:
            held_out = sum(f < run for f in fold_of.values())
            cut = (f"time budget {cv.budget_s:.0f} s: {run} of {k} folds run ({held_out} of {len(people)} people "
                   f"held out, {elapsed:.0f} s); the next fold would not fit, so folds {run + 1}-{k} were cut")
            break
        train = [p for p in pairs if fold_of[p.user_id] != fold]
        held = [p for p in pairs if fold_of[p.user_id] == fold]
        for name, row in rows.items():
            if row.error:
                continue
            try:
                acc, own, wrong, invalid, seconds, top_k = _measure(name, train, held, options, cache, cv.seed)
            except PrbenchError as exc:
                row.error = f"fold {fold + 1}: {exc}"
                continue
            row.per_person.update(acc)
            row.own_profile.update(own)
            row.wrong_profile.update(wrong)
            row.n_invalid += invalid
            row.train_seconds += seconds
            row.top_k = top_k
            if acc:
                row.fold_means.append(float(np.mean(list(acc.values()))))
        run += 1
        if progress is not None:
            progress(f"fold {fold + 1}/{k}: " + ", ".join(
                f"{n} {100 * r.fold_means[-1]:.1f}" for n, r in rows.items() if r.fold_means and not r.error))
    return _choose(rows, names, cv, k, rule, run, cut, len(people), fold_of)


def _choose(rows: dict[str, Candidate], names: list[str], cv: CVSettings, k: int, rule: str, run: int,
            cut: str | None, n_people: int, fold_of: dict[str, int]) -> Recommendation:
    """The numbers over the people every candidate scored, and the choice by the rule of the module doc."""
    measured = [n for n in names if not rows[n].error and rows[n].per_person]
    if not measured:
        raise PrbenchError("no candidate could be measured: " + "; ".join(
            f"{n}: {rows[n].error or 'no held-out pair scored'}" for n in names))
    common = sorted(set.intersection(*(set(rows[n].per_person) for n in measured)))
    if not common:
        raise PrbenchError("the candidates share no held-out person scored validly")
    for row in rows.values():
        row.n_people = len(row.per_person)
        if row.error or not row.per_person:
            continue
        mine = [u for u in common if u in row.per_person]  # a reference: on the same people where it scored them
        if not mine:
            continue
        vals = np.array([row.per_person[u] for u in mine])
        row.mean = float(vals.mean())
        row.ci_low, row.ci_high = metrics.bootstrap_ci(vals, seed=cv.seed, n_boot=cv.n_boot)
        for field, values in (("profile_mean", row.own_profile), ("wrong_mean", row.wrong_profile)):
            got = [values[u] for u in mine if u in values]
            setattr(row, field, float(np.mean(got)) if got else None)
        row.fold_sd = float(np.std(row.fold_means, ddof=1)) if len(row.fold_means) > 1 else None
    acc = np.array([[rows[n].per_person[u] for n in measured] for u in common])
    for n, p in zip(measured, p_best(acc, seed=cv.seed, n_boot=cv.n_boot)):
        rows[n].p_best = float(p)
    means = {n: rows[n].mean or 0.0 for n in measured}
    best = max(measured, key=lambda n: (means[n], -rows[n].cost))
    near = [n for n in measured if means[n] >= means[best] - cv.margin - 1e-12]
    chosen = min(near, key=lambda n: (rows[n].cost, -means[n], n))
    pts = f"{100 * cv.margin:g} point{'' if round(100 * cv.margin, 9) == 1 else 's'}"
    if chosen == best:
        why = f"{chosen}: best mirrored accuracy over {len(common)} held-out people ({100 * means[chosen]:.1f}%)"
    else:
        why = (f"{chosen}: within {pts} of the best ({best} {100 * means[best]:.1f}% vs {100 * means[chosen]:.1f}% "
               f"over {len(common)} held-out people) and cheaper, so kept")
    rec = Recommendation(method=chosen, why=why, settings=cv, folds=k, folds_rule=rule, folds_run=run, cut=cut,
                         people=n_people, scored_people=len(common),
                         candidates=[rows[n] for n in names], references=[r for r in rows.values() if r.reference],
                         folds_of=fold_of)
    others = [n for n in measured if n != chosen]
    if others:
        runner = max(others, key=lambda n: means[n])
        diff = np.array([rows[runner].per_person[u] - rows[chosen].per_person[u] for u in common])
        low, high = metrics.bootstrap_ci(diff, seed=cv.seed, n_boot=cv.n_boot)
        rec.runner_up, rec.gap, rec.gap_ci = runner, float(diff.mean()), (low, high)
        sure = rows[chosen].p_best or 0.0
        if low is not None and high is not None and high > cv.margin and sure < cv.sure:
            rec.warning = (f"{len(common)} people are too few to tell {chosen} and {runner} apart: P({chosen} is best) "
                           f"= {sure:.2f} (below {cv.sure:g}), {runner} minus {chosen} = {100 * diff.mean():+.1f} "
                           f"points per person [{100 * low:.1f}, {100 * high:.1f}], which allows more than the "
                           f"{pts} margin; {chosen} was kept because {why.split(': ', 1)[1]}")
    level = [r for r in rec.references if r.mean is not None and r.mean >= means[chosen]]
    if level:
        rec.reference_note = "; ".join(
            f"the reference {r.method} (trains nothing) reads {100 * (r.mean or 0):.1f}% on the same held-out people, "
            f"{chosen} {100 * means[chosen]:.1f}%: {chosen} adds no accuracy over it on this data" for r in level)
    if cut:
        rec.why += f" ({cut})"
    return rec
