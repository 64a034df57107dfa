"""The protocol that tells personalized RMs apart: seen vs unseen users, k-shot curves, controls.

Splits (`split_protocol`): users are cut into *seen* and *unseen* (user-disjoint), items
(questions, grouped by `item_key`) into *train* and *test* (item-disjoint). The model trains on
seen users x train items; it is measured on seen users x test items ("seen": new questions of
known users) and on unseen users x test items ("unseen"); the unseen users' train-item pairs
are the pool their k shots are drawn from, so a shot never shares a question with a judged pair.

Numbers (`run_protocol`), every one per user first, then over users:
- accuracy per user (ties 0.5), mean over users with a bootstrap CI over users, the worst
  decile (mean of the worst 10% of users, at least one) and the 10th percentile;
- the k-shot curve for unseen users, k in `ks`, `draws` seeded draws of k shots per user
  (seed, user, k, draw), each user's accuracy averaged over draws; a user with fewer than k
  pool pairs is left out of that k (counted). An RM without per-user state (`adaptable`
  false) has the k = 0 point only;
- controls beside the k = 0 number: the same RM under `none` (no context) and under
  `wrong-profile` (another user's posts), k shots of *another* unseen user (wrong-user shots,
  at the largest k), and `baseline:lexical` / `baseline:embedding` under the protocol's condition;
- the swap test (`swap_test`): each unseen user scored with another unseen user's fitted state
  (shots and profile); the drop from their own is the method's personalization, with a CI;
- the gaps: seen users' new questions minus unseen users at k = 0 (warned above
  `gap_warning`: fits its training users far better than new ones) and training pairs minus
  unseen users (warned above twice that: memorises its training pairs).
`user_breakdown` gives the per-user distribution and the seen/unseen split of any eval run.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from prbench.data.pairs import PreferencePair, split_by_user, users_of
from prbench.errors import PrbenchError
from prbench.stats import metrics

KS = (0, 1, 2, 4, 8, 16)
BASELINES = ("baseline:lexical", "baseline:embedding")


@dataclass
class ProtocolConfig:
    condition: str = "profile"
    holdout_users: float = 0.25
    holdout_items: float = 0.5
    ks: tuple[int, ...] = KS
    draws: int = 5
    controls: bool = True
    gap_warning: float = 0.15
    seed: int = 0
    n_boot: int = 1000
    top_k: int = 10
    retriever: str = "bm25"


@dataclass
class ProtocolSplit:
    train: list[PreferencePair]
    seen_test: list[PreferencePair]
    unseen_pool: list[PreferencePair]
    unseen_test: list[PreferencePair]
    info: dict[str, Any] = field(default_factory=dict)


def default_item_key(pair: PreferencePair) -> str:
    return " ".join(pair.prompt.lower().split())


def split_protocol(pairs: Sequence[PreferencePair], cfg: ProtocolConfig | None = None, *,
                   item_key: Callable[[PreferencePair], str] = default_item_key,
                   user_group: Callable[[str], str] | None = None) -> ProtocolSplit:
    """User-disjoint x item-disjoint split (see module docstring); seeded, order-free."""
    cfg = cfg or ProtocolConfig()
    if len(users_of(pairs)) < 4:
        raise PrbenchError(f"the protocol needs at least 4 users, got {len(users_of(pairs))}")
    seen, unseen = split_by_user(pairs, (1 - cfg.holdout_users, cfg.holdout_users), seed=cfg.seed, by="user",
                                 group=user_group)
    keys = sorted({item_key(p) for p in pairs})
    random.Random(f"{cfg.seed}:protocol-items").shuffle(keys)
    test_keys = set(keys[: max(1, round(cfg.holdout_items * len(keys)))])
    split = ProtocolSplit(
        train=[p for p in seen if item_key(p) not in test_keys],
        seen_test=[p for p in seen if item_key(p) in test_keys],
        unseen_pool=[p for p in unseen if item_key(p) not in test_keys],
        unseen_test=[p for p in unseen if item_key(p) in test_keys],
    )
    for name in ("train", "unseen_test"):
        if not getattr(split, name):
            raise PrbenchError(f"protocol split left no {name.replace('_', ' ')} pairs; use more users or items")
    split.info = {"seen_users": len(users_of(seen)), "unseen_users": len(users_of(unseen)),
                  "items": len(keys), "test_items": len(test_keys),
                  **{f"{k}_pairs": len(getattr(split, k)) for k in ("train", "seen_test", "unseen_pool", "unseen_test")}}
    return split


# --------------------------------------------------------------------------- scoring pieces


def pair_credits(rm, pairs: Sequence[PreferencePair], condition: str, cfg: ProtocolConfig,
                 pool: Sequence[PreferencePair] = (), memo: dict | None = None) -> tuple[list[float | None], list[str]]:
    """Per-pair credit (1 / 0.5 / 0; None = invalid score) under `condition`, and each pair's user.

    Views come from `conditions.build_view` (what `prbench eval` shows the RM); `memo` keeps them
    across the many scorings of one protocol run (a view depends only on pair, condition, seed).
    """
    from prbench.context.conditions import build_view
    from prbench.context.retrieval import load_retriever

    memo = {} if memo is None else memo
    todo = [p for p in pairs if (condition, p.key) not in memo]
    if todo:
        retriever = memo.setdefault(("retriever", cfg.retriever), load_retriever(cfg.retriever))
        sources = [p.to_source() for p in pool or pairs]
        for p in todo:
            memo[(condition, p.key)] = build_view(p.to_source(), condition, retriever=retriever, top_k=cfg.top_k,
                                                  pool=sources, seed=cfg.seed)
    views = [memo[(condition, p.key)] for p in pairs]
    chosen = rm.score([(v, p.chosen) for v, p in zip(views, pairs)])
    rejected = rm.score([(v, p.rejected) for v, p in zip(views, pairs)])
    out: list[float | None] = []
    for c, r in zip(chosen, rejected):
        out.append(float(metrics.pair_outcomes([c.value], [r.value])[0]) if c.valid and r.valid else None)
    return out, [p.user_id for p in pairs]


def per_user(credits: Sequence[float | None], users: Sequence[str]) -> dict[str, float]:
    by: dict[str, list[float]] = defaultdict(list)
    for c, u in zip(credits, users):
        if c is not None:
            by[u].append(c)
    return {u: float(np.mean(v)) for u, v in by.items()}


def distribution(user_acc: dict[str, float], *, seed: int, n_boot: int = 1000) -> dict[str, Any]:
    """Mean over users with a bootstrap CI over users, worst decile and 10th percentile."""
    vals = np.array(sorted(user_acc.values()), dtype=float)
    if vals.size == 0:
        return {"n_users": 0, "mean": None, "ci_low": None, "ci_high": None, "worst_decile": None, "p10": None}
    low, high = metrics.bootstrap_ci(vals, seed=seed, n_boot=n_boot)
    worst = vals[: max(1, math.ceil(0.1 * vals.size))]
    return {"n_users": int(vals.size), "mean": float(vals.mean()), "ci_low": low, "ci_high": high,
            "worst_decile": float(worst.mean()), "p10": float(np.percentile(vals, 10))}


def _is_adaptable(rm) -> bool:
    return bool(getattr(rm, "adaptable", False)) and callable(getattr(rm, "adapt", None))


def _draw(pool: Sequence[PreferencePair], k: int, seed: int, user: str, draw: int) -> list[PreferencePair]:
    items = sorted(pool, key=lambda p: p.key)
    return random.Random(f"{seed}:shots:{user}:{k}:{draw}").sample(items, k)


def kshot_curve(rm, split: ProtocolSplit, cfg: ProtocolConfig, *, wrong_user: bool = False,
                memo: dict | None = None) -> dict[str, Any]:
    """Unseen users' accuracy after k shots (their own, or another unseen user's with `wrong_user`)."""
    test_by: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in split.unseen_test:
        test_by[p.user_id].append(p)
    pool_by: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in split.unseen_pool:
        pool_by[p.user_id].append(p)
    users = sorted(test_by)
    donor = {u: users[(i + 1) % len(users)] for i, u in enumerate(users)}
    ks = [k for k in cfg.ks if k == 0 or _is_adaptable(rm)]
    if wrong_user:  # the largest k every unseen user's donor can supply
        fits = [k for k in ks if k > 0 and all(len(pool_by[donor[u]]) >= k for u in users)]
        ks = [max(fits)] if fits else []
    curve = []
    for k in ks:
        acc: dict[str, float] = {}
        for u in users:
            source = donor[u] if wrong_user else u
            if k > len(pool_by[source]):
                continue
            runs = []
            for d in range(cfg.draws if k > 0 else 1):
                if _is_adaptable(rm):
                    rm.adapt(u, _draw(pool_by[source], k, cfg.seed, source, d) if k else [])
                credits, owners = pair_credits(rm, test_by[u], cfg.condition, cfg, pool=split.unseen_test, memo=memo)
                runs.append(per_user(credits, owners).get(u))
            scored = [r for r in runs if r is not None]
            if scored:
                acc[u] = float(np.mean(scored))
            if _is_adaptable(rm):
                rm.adapt(u, [])
        curve.append({"k": k, **distribution(acc, seed=cfg.seed, n_boot=cfg.n_boot),
                      "users_short_of_k": len(users) - len(acc)})
    return {"curve": curve, "adaptable": _is_adaptable(rm)}


def _swapped(pairs: Sequence[PreferencePair], donor: str, profile: Sequence[Any]) -> list[PreferencePair]:
    """`pairs` as if asked by `donor`: the donor's identity (so their fitted state) and profile, new ids."""
    return [p.model_copy(update={"user_id": donor, "profile": list(profile), "id": f"{p.key}~as~{donor}"})
            for p in pairs]


def swap_test(rm, split: ProtocolSplit, cfg: ProtocolConfig, memo: dict | None = None) -> dict[str, Any]:
    """Each unseen user's test pairs scored with their own fitted state, then with another unseen user's.

    The state is everything the method fits per user: the k shots' parameters (k = the largest
    k every user's pool supplies, 0 for RMs without per-user state) and the profile. The donor
    of each user is the next one in a seeded shuffle. `drop` = own minus swapped accuracy, per
    user, mean with a bootstrap CI over users and a Wilcoxon signed-rank p-value: the method's
    personalization (about 0 for an RM that ignores the user).
    """
    from scipy import stats

    test_by: dict[str, list[PreferencePair]] = defaultdict(list)
    pool_by: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in split.unseen_test:
        test_by[p.user_id].append(p)
    for p in split.unseen_pool:
        pool_by[p.user_id].append(p)
    users = sorted(test_by)
    if len(users) < 2:
        return {"skipped": "the swap test needs at least 2 unseen users"}
    random.Random(f"{cfg.seed}:swap").shuffle(users)
    donor = {u: users[(i + 1) % len(users)] for i, u in enumerate(users)}
    fits = [k for k in cfg.ks if k > 0 and all(len(pool_by[u]) >= k for u in users)]
    k = max(fits) if fits and _is_adaptable(rm) else 0
    if k:
        for u in users:
            rm.adapt(u, _draw(pool_by[u], k, cfg.seed, u, 0))
    try:
        own = per_user(*pair_credits(rm, split.unseen_test, cfg.condition, cfg, pool=split.unseen_test, memo=memo))
        swapped_pairs = [q for u in users for q in _swapped(test_by[u], donor[u], test_by[donor[u]][0].profile)]
        credits, _ = pair_credits(rm, swapped_pairs, cfg.condition, cfg, pool=swapped_pairs, memo=memo)
    finally:
        for u in users:
            if k:
                rm.adapt(u, [])
    owner = [u for u in users for _ in test_by[u]]
    swapped = per_user(credits, owner)
    both = [u for u in users if u in own and u in swapped]
    drop = np.array([own[u] - swapped[u] for u in both])
    if drop.size == 0:
        return {"skipped": "no unseen user was scored validly"}
    low, high = metrics.bootstrap_ci(drop, seed=cfg.seed, n_boot=cfg.n_boot)
    p_value = float(stats.wilcoxon(drop).pvalue) if np.any(drop != 0) else 1.0
    return {"k": k, "n_users": len(both), "own": float(np.mean([own[u] for u in both])),
            "swapped": float(np.mean([swapped[u] for u in both])), "drop": float(drop.mean()),
            "ci_low": low, "ci_high": high, "p_value": p_value}


def _acc(rm, pairs, condition, cfg, pool=(), memo=None) -> dict[str, Any]:
    credits, owners = pair_credits(rm, pairs, condition, cfg, pool=pool, memo=memo)
    valid = [c for c in credits if c is not None]
    return {"pair_accuracy": float(np.mean(valid)) if valid else None, "n": len(valid),
            "n_invalid": len(credits) - len(valid),
            **distribution(per_user(credits, owners), seed=cfg.seed, n_boot=cfg.n_boot)}


def run_protocol(rm, split: ProtocolSplit, cfg: ProtocolConfig | None = None, *, encoder: str | None = None,
                 cache: Any = None) -> dict[str, Any]:
    """Every number of the protocol for one RM trained on `split.train` (see module docstring)."""
    from prbench.rewards import load_rm

    cfg = cfg or ProtocolConfig()
    out: dict[str, Any] = {"config": {**asdict(cfg), "ks": list(cfg.ks)}, "split": split.info}
    memo: dict = {}
    out["train"] = _acc(rm, split.train, cfg.condition, cfg, memo=memo)
    out["seen"] = _acc(rm, split.seen_test, cfg.condition, cfg, memo=memo) if split.seen_test else None
    shots = kshot_curve(rm, split, cfg, memo=memo)
    out["unseen"] = shots
    zero = shots["curve"][0]
    if cfg.controls:
        controls: dict[str, Any] = {
            "no_context": _acc(rm, split.unseen_test, "none", cfg, memo=memo),
            # donors: any other user of the data (unseen ones alone may be a single user)
            "wrong_profile": _acc(rm, split.unseen_test, "wrong-profile", cfg, memo=memo,
                                  pool=split.unseen_test + split.unseen_pool + split.seen_test + split.train),
        }
        wrong = kshot_curve(rm, split, cfg, wrong_user=True, memo=memo)["curve"]
        if wrong:
            controls["wrong_user_shots"] = wrong[0]
        for spec in BASELINES:
            base = embedding_baseline(encoder or "builtin:minilm-l6", cache) if spec.endswith("embedding") else load_rm(spec)
            controls[spec] = _acc(base, split.unseen_test, cfg.condition, cfg, memo=memo)
        out["controls"] = controls
        out["swap"] = swap_test(rm, split, cfg, memo=memo)
    train_acc, unseen_acc = out["train"]["mean"], zero["mean"]
    seen_acc = out["seen"]["mean"] if out["seen"] else None
    out["gap"] = None if train_acc is None or unseen_acc is None else train_acc - unseen_acc
    out["seen_unseen_gap"] = None if seen_acc is None or unseen_acc is None else seen_acc - unseen_acc
    out["warnings"] = []
    if seen_acc is not None and unseen_acc is not None and seen_acc - unseen_acc > cfg.gap_warning:
        out["warnings"].append(
            f"fits its training users far better than unseen ones: {100 * seen_acc:.1f}% on seen users' new questions "
            f"vs {100 * unseen_acc:.1f}% on unseen users at k=0 (gap {100 * out['seen_unseen_gap']:.1f} points)")
    if out["gap"] is not None and out["gap"] > 2 * cfg.gap_warning:
        out["warnings"].append(
            f"memorises its training pairs: {100 * train_acc:.1f}% on training pairs vs {100 * unseen_acc:.1f}% on "
            f"unseen users at k=0 (gap {100 * out['gap']:.1f} points)")
    for msg in out["warnings"]:
        warnings.warn(msg, stacklevel=2)
    return out


def embedding_baseline(encoder: str, cache: Any = None):
    """`baseline:embedding` (same formula: mean cosine of the response to each shown post) on the
    memoised, optionally disk-cached `Embedder`, so the many protocol scorings encode each text once."""
    import numpy as np

    from prbench.rewards.base import Score
    from prbench.rewards.baselines import EmbeddingRM, context_units
    from prbench.rewards.pal import Embedder

    class CachedEmbeddingRM(EmbeddingRM):
        def score(self, batch):
            embed = Embedder(self.encoder, cache=cache)
            texts = list(dict.fromkeys(t for view, resp in batch for t in (resp, *context_units(view))))
            row = dict(zip(texts, embed(texts))) if texts else {}
            return [Score(float((np.stack([row[t] for t in context_units(v)]) @ row[r]).mean())) for v, r in batch]

    return CachedEmbeddingRM(encoder)


def headline(protocol: dict[str, Any] | ProtocolReport) -> ProtocolHeadline:
    """The few numbers a summary table shows: train, seen, unseen k=0 and best k, controls."""
    p = protocol if isinstance(protocol, ProtocolReport) else ProtocolReport.model_validate(protocol)
    if p.train is None or p.unseen is None:
        raise PrbenchError("a protocol headline needs the protocol's numbers (train, unseen)")
    curve = p.unseen.curve
    best = max((c for c in curve if c.mean is not None), key=lambda c: c.k, default=None)
    row = ProtocolHeadline(train=p.train.mean, seen=p.seen.mean if p.seen else None, unseen_k0=curve[0].mean,
                           unseen_worst_decile_k0=curve[0].worst_decile, unseen_kmax=best.mean if best else None,
                           kmax=best.k if best else None, gap=p.gap, swap_drop=p.swap.drop if p.swap else None)
    for name, c in (p.controls or {}).items():
        setattr(row, name, c.mean)  # a control's column, by its name (an extra field)
    return row


def control_mean(h: ProtocolHeadline, name: str) -> float | None:
    """A control's mean in a headline (`baseline:lexical`, `no_context` ...), None when it did not run."""
    extra = h.model_extra or {}
    if name not in extra:
        return None
    value: float | None = extra[name]
    return value


# -- protocol.json: the typed record `train_method` writes and its readers read ------------------------------------
class _Part(BaseModel):
    """A part of protocol.json; the fields a part has are the keys it was written with (`dump` leaves the rest out)."""

    model_config = ConfigDict(extra="allow")


class UserStats(_Part):
    """`distribution`: mean over users with a bootstrap CI over users, worst decile, 10th percentile."""

    n_users: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    worst_decile: float | None
    p10: float | None


class PairStats(_Part):
    """Accuracy on a set of pairs: per pair, then per user (`distribution`)."""

    pair_accuracy: float | None
    n: int
    n_invalid: int
    n_users: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    worst_decile: float | None
    p10: float | None


class CurvePoint(_Part):
    """One k of the k-shot curve."""

    k: int
    n_users: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    worst_decile: float | None
    p10: float | None
    users_short_of_k: int


class KShot(_Part):
    curve: list[CurvePoint]
    adaptable: bool


class SwapTest(_Part):
    """`swap_test`: own minus another unseen user's state, or why it did not run (`skipped`)."""

    skipped: str | None = None
    k: int | None = None
    n_users: int | None = None
    own: float | None = None
    swapped: float | None = None
    drop: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None


class ProtocolHeadline(_Part):
    """`headline`: the few numbers a summary table shows; each control's mean follows under its name."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)
    train: float | None
    seen: float | None
    unseen_k0: float | None
    unseen_worst_decile_k0: float | None
    unseen_kmax: float | None
    kmax: int | None
    gap: float | None
    swap_drop: float | None


class ProtocolReport(_Part):
    """protocol.json: the method, the recommendation that chose it, and the protocol's numbers (or why skipped).

    `eval_data` is the CLI's --eval-data score (shown and printed, not in the file)."""

    method: str | None = None  # None: `run_protocol`'s numbers alone (no training recorded)
    refit: bool | None = None
    recommendation: dict[str, Any] | None = None
    skipped: str | None = None
    config: dict[str, Any] | None = None
    split: dict[str, Any] | None = None
    train: PairStats | None = None
    seen: PairStats | None = None
    unseen: KShot | None = None
    controls: dict[str, PairStats | CurvePoint] | None = None
    swap: SwapTest | None = None
    gap: float | None = None
    seen_unseen_gap: float | None = None
    warnings: list[str] = []
    headline: ProtocolHeadline | None = None
    trained_on: str | None = None
    eval_data: UserStats | None = None

    def dump(self) -> dict[str, Any]:
        """The keys it was written with, in the order protocol.json has them."""
        return self.model_dump(exclude_unset=True)

    def control(self, name: str) -> PairStats | CurvePoint | None:
        return self.controls[name] if self.controls and name in self.controls else None


def user_breakdown(records: Sequence[dict[str, Any]], rm: Any, *, seed: int = 0, n_boot: int = 1000,
                   gap_warning: float = 0.15) -> dict[str, Any]:
    """Per-user accuracy distribution of an eval run; seen vs unseen users when the RM knows its training users."""
    valid = [r for r in records if r.get("credit") is not None and r.get("user_id")]
    if not valid:
        return {}
    acc = per_user([r["credit"] for r in valid], [r["user_id"] for r in valid])
    out: dict[str, Any] = {"users": distribution(acc, seed=seed, n_boot=n_boot)}
    seen_fn = getattr(rm, "seen_users", None)
    if callable(seen_fn):
        seen = seen_fn()
        parts = {"seen": {u: a for u, a in acc.items() if u in seen},
                 "unseen": {u: a for u, a in acc.items() if u not in seen}}
        for name, part in parts.items():
            credits = [r["credit"] for r in valid if (r["user_id"] in seen) == (name == "seen")]
            out[name] = {**distribution(part, seed=seed, n_boot=n_boot),
                         "pair_accuracy": float(np.mean(credits)) if credits else None, "n": len(credits)}
        s, u = out["seen"]["pair_accuracy"], out["unseen"]["pair_accuracy"]
        if s is not None and u is not None and s - u > gap_warning:
            out["warning"] = (f"seen users {100 * s:.1f}% vs unseen users {100 * u:.1f}%: the model fits its "
                              "training users far better than new ones")
    return out
