"""The scoring core shared by every driver: per-example seeds, cached scoring, record builders.

`evaluate`, the Ray workers (`distributed`) and the downstream stages import this module, so
none of them reaches into another driver's internals. Tie rule and invalid handling are those
documented in `prbench.evaluation.evaluate`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.rewards.base import PairQuery, PairwiseRM, PointwiseRM, RewardModel, Score, Verdict
from prbench.schema import Example
from prbench.stats import metrics
from prbench.store.cache import Cache, content_key


def example_seed(seed: int, example_id: str, purpose: str) -> int:
    """A per-example seed: results never depend on order, batching, caching or workers."""
    return int(content_key(seed, example_id, purpose)[:8], 16)


def chosen_first(seed: int, example_id: str) -> bool:
    """Whether `chosen` is shown as Response A for this example (seeded coin flip)."""
    return random.Random(example_seed(seed, example_id, "position")).random() < 0.5


def _round(v: float) -> float:
    # 7 significant digits: runs with the same batch size give the same bytes; across batch sizes
    # float32 kernel noise can move the last digit, so scores there agree within 1e-5 only.
    return float(f"{v:.7g}")


def _check_results(rm: RewardModel, results: Sequence[Any], n: int, kind: type) -> None:
    """A plug-in RM must return one `kind` per input, in order: fail clearly here, not with a KeyError later."""
    if len(results) != n:
        raise PrbenchError(f"{rm.spec}: returned {len(results)} results for {n} inputs")
    bad = next((r for r in results if not isinstance(r, kind)), None)
    if bad is not None:
        raise PrbenchError(f"{rm.spec}: returned a {type(bad).__name__}, not a {kind.__name__}")


# -- pointwise ------------------------------------------------------------------------------
def score_cached(rm: PointwiseRM, items: Sequence[tuple[View, str]], cache: Cache) -> list[Score]:
    fp = rm.fingerprint()
    keys = [content_key("score", fp, v.key(), r) for v, r in items]
    hits = cache.get_many(keys)
    # A response shared by several pairs of one item (RM-Bench's grid, RewardBench 2's chosen) is scored once.
    first: dict[str, int] = {}
    todo = [first.setdefault(k, i) for i, k in enumerate(keys) if k not in hits and k not in first]
    fresh = list(rm.score([items[i] for i in todo])) if todo else []
    _check_results(rm, fresh, len(todo), Score)
    out: list[Score | None] = [None] * len(items)
    store = {}
    for i, s in zip(todo, fresh):
        out[i] = s
        if s.valid:
            store[keys[i]] = {"v": s.value, "t": s.truncated}
    cache.put_many(store)
    done: list[Score] = []
    for i, k in enumerate(keys):
        got = out[i]
        if got is None:
            j = first.get(k)
            if j is not None:  # a shared response: the copy of its first occurrence's fresh score
                twin = out[j]
                assert twin is not None  # first occurrences are scored fresh above
                got = Score(twin.value, truncated=twin.truncated, error=twin.error)
            else:
                got = Score(hits[k]["v"], truncated=hits[k]["t"])
        done.append(got)
    return done


def _pointwise_records(rm: PointwiseRM, exs: Sequence[Example], views: Sequence[View], cache: Cache) -> list[dict]:
    items = [(v, r) for ex, v in zip(exs, views) for r in (ex.chosen, ex.rejected)]
    scores = score_cached(rm, items, cache)
    recs = []
    for j, ex in enumerate(exs):
        c, r = scores[2 * j], scores[2 * j + 1]
        rec = _base_record(ex, views[j])
        rec.update(score_chosen=_round(c.value) if c.valid else None,
                   score_rejected=_round(r.value) if r.valid else None,
                   truncated={"chosen": c.truncated, "rejected": r.truncated})
        if c.valid and r.valid:
            rec["credit"] = float(metrics.pair_outcomes([c.value], [r.value])[0])
            rec["margin"] = _round(c.value - r.value)
        else:
            rec["credit"] = None
            rec["invalid"] = c.error or r.error or "non-finite score"
        recs.append(rec)
    return recs


# -- pairwise -------------------------------------------------------------------------------
def _side(verdict: Verdict, chosen_pos: str) -> str | None:
    """Map a positional verdict to 'chosen' / 'rejected' / 'tie' (None = invalid)."""
    if verdict.winner not in ("A", "B", "tie") or verdict.error:
        return None  # also 'a', 'C', '': never silently a side
    if verdict.winner == "tie":
        return "tie"
    return "chosen" if verdict.winner == chosen_pos else "rejected"


SIDE_CREDIT = {"chosen": 1.0, "rejected": 0.0, "tie": 0.5}


def _pairwise_records(
    rm: PairwiseRM, exs: Sequence[Example], views: Sequence[View], seed: int, both_orders: bool
) -> list[dict]:
    queries: list[PairQuery] = []
    plan: list[list[str]] = []
    for ex, v in zip(exs, views):
        first = "A" if chosen_first(seed, ex.id) else "B"
        orders = [first, "B" if first == "A" else "A"] if both_orders else [first]
        plan.append(orders)
        for pos in orders:
            a, b = (ex.chosen, ex.rejected) if pos == "A" else (ex.rejected, ex.chosen)
            queries.append(PairQuery(v, a, b, seed=example_seed(seed, ex.id, f"judge-{pos}")))
    verdicts = list(rm.compare(queries))
    _check_results(rm, verdicts, len(queries), Verdict)
    recs, k = [], 0
    for ex, v, orders in zip(exs, views, plan):
        vs = verdicts[k : k + len(orders)]
        k += len(orders)
        sides = [_side(vd, pos) for vd, pos in zip(vs, orders)]
        rec = _base_record(ex, v)
        rec.update(
            chosen_position=orders[0],
            verdicts=[vd.winner for vd in vs],
            sides=sides,
            truncated=any(vd.truncated for vd in vs),
        )
        given = [vd.meta.get("p_a") for vd in vs]
        probs = [float(p) for p in given if isinstance(p, (int, float)) and math.isfinite(p)]
        has_probs = len(probs) == len(given)
        if has_probs:
            rec["p_a"] = [_round(p) for p in probs]
        valid = [s for s in sides if s is not None]
        if len(valid) < len(sides):
            rec["credit"] = None
            rec["invalid"] = next((vd.error for vd in vs if vd.error), None) or "unparseable verdict"
        elif len(valid) == 1:
            rec["credit"] = SIDE_CREDIT[valid[0]]
        else:
            rec["consistent"] = valid[0] == valid[1]
            if has_probs:
                # Probability verdicts: average the chance given to `chosen` over both positions,
                # which cancels a constant position bias instead of turning it into ties.
                p_chosen = sum(p if pos == "A" else 1 - p for p, pos in zip(probs, orders)) / len(orders)
                rec["p_chosen"] = _round(p_chosen)
                rec["credit"] = 1.0 if p_chosen > 0.5 else 0.0 if p_chosen < 0.5 else 0.5
            else:
                rec["credit"] = SIDE_CREDIT[valid[0]] if valid[0] == valid[1] else 0.5
        recs.append(rec)
    return recs


def chunk_records(rm: RewardModel, exs: Sequence[Example], views: Sequence[View], seed: int, both_orders: bool,
                  cache: Cache) -> list[dict[str, Any]]:
    """Records for one chunk of examples, whatever the RM kind (also what a Ray worker runs)."""
    if isinstance(rm, PairwiseRM):
        return _pairwise_records(rm, exs, views, seed, both_orders)
    if not isinstance(rm, PointwiseRM):  # load_rm refuses any other kind; an RM built by hand may not be one
        raise PrbenchError(f"{rm.spec}: a {type(rm).__name__} is neither a PointwiseRM nor a PairwiseRM")
    return _pointwise_records(rm, exs, views, cache)


def _base_record(ex: Example, view: View) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": ex.id, "category": ex.category}
    if ex.user_id:
        rec["user_id"] = ex.user_id
    rec["longer"] = "chosen" if len(ex.chosen.split()) > len(ex.rejected.split()) else (
        "rejected" if len(ex.rejected.split()) > len(ex.chosen.split()) else "equal")
    if view.posts:
        rec["posts_shown"] = view.shown_posts
    if "donor" in view.meta:
        rec["donor"] = view.meta["donor"]
    if view.pairs:
        rec["history_shown"] = view.shown_posts
    if view.condition != "none" and not view.units and not view.aspects:
        rec["no_context"] = True  # the condition found nothing of this user to show: scored as `none`
    # One pair of a multi-response item: metrics.collapse_items scores the item by its rule.
    for key, value in (("item", ex.item_id), ("rule", ex.rule), ("variant", ex.variant), ("section", ex.section),
                       ("format", ex.format)):
        if value is not None:
            rec[key] = value
    return rec


# -- summary --------------------------------------------------------------------------------
