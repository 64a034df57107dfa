"""Prefix rewards for reward-guided decoding and policy accuracy: a pointwise RM scoring response
prefixes at text level, batched, deduplicated, memoised and disk-cached (the eval score key).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from prbench.context.conditions import View
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, RewardModel, load_rm
from prbench.store.cache import Cache, NullCache, content_key

REWARD_NORMS = ("none", "zscore")



# ---------------------------------------------------------------------------------------------
# Prefix rewards: batched, deduplicated, memoised, disk-cached
# ---------------------------------------------------------------------------------------------


@dataclass
class RewardStats:
    """How many prefix rewards were asked for and how many reached the RM."""

    requested: int = 0
    memo_hits: int = 0
    cache_hits: int = 0
    rm_calls: int = 0
    rm_texts: int = 0
    invalid: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def rm_text(text: str) -> str:
    """What the RM scores: the decoded response with surrounding whitespace stripped."""
    return text.strip()


class PrefixRewards:
    """Text-level rewards of response prefixes, each distinct (view, text) scored once.

    The disk key is `prbench eval`'s score key (`"score"`, RM fingerprint, view key, text), so a
    full answer scored here is a cache hit for `eval`/Best-of-N and vice versa. Invalid scores
    are memoised (NaN) for this object's lifetime but never written to disk.
    """

    def __init__(self, rm: PointwiseRM, cache: Cache | None = None, batch_size: int = 64):
        if not isinstance(rm, PointwiseRM):
            raise PrbenchError(f"{getattr(rm, 'spec', rm)}: reward-guided decoding needs a pointwise RM "
                               "(a score per text); use a scalar RM, a baseline, pmi: or a pointwise judge")
        self.rm = rm
        self.cache = cache if cache is not None else NullCache()
        self.batch_size = max(1, int(batch_size))
        self.fingerprint = rm.fingerprint()
        self.stats = RewardStats()
        self._memo: dict[str, float] = {}
        self._view_keys: dict[int, tuple[View, str]] = {}

    def _view_key(self, view: View) -> str:
        hit = self._view_keys.get(id(view))
        if hit is None or hit[0] is not view:
            hit = (view, view.key())  # the view is kept so its id() cannot be reused
            self._view_keys[id(view)] = hit
        return hit[1]

    def key(self, view: View, text: str) -> str:
        return content_key("score", self.fingerprint, self._view_key(view), text)

    def __call__(self, queries: Sequence[tuple[View, str]]) -> list[float]:
        """A reward per (view, text), NaN when the RM could not score it; order preserved."""
        keys = [self.key(v, t) for v, t in queries]
        self.stats.requested += len(keys)
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k in self._memo:
                self.stats.memo_hits += 1
            else:
                first.setdefault(k, i)
        if first:
            hits = self.cache.get_many(list(first))
            for k, data in hits.items():
                self._memo[k] = float(data["v"])
            self.stats.cache_hits += len(hits)
            todo = [k for k in first if k not in hits]
            for start in range(0, len(todo), self.batch_size):
                part = todo[start : start + self.batch_size]
                scores = self.rm.score([queries[first[k]] for k in part])
                self.stats.rm_calls += 1
                self.stats.rm_texts += len(part)
                store = {}
                for k, s in zip(part, scores):
                    if s.valid:
                        self._memo[k] = float(s.value)
                        store[k] = {"v": s.value, "t": s.truncated}
                    else:
                        self._memo[k] = math.nan
                        self.stats.invalid += 1
                self.cache.put_many(store)
        return [self._memo[k] for k in keys]


def shape_rewards(rewards: np.ndarray, norm: str) -> tuple[np.ndarray, int]:
    """Rewards of one decision point's candidates as used in the guided score; (values, invalid).

    Invalid (NaN) rewards take the mean of the valid ones; none valid -> all zero. "zscore"
    then standardises across the candidates (zero when they are all equal).
    """
    r = np.asarray(rewards, dtype=np.float64).copy()
    bad = ~np.isfinite(r)
    n_bad = int(bad.sum())
    if n_bad:
        r[bad] = r[~bad].mean() if n_bad < r.size else 0.0
    if norm == "zscore":
        sd = r.std()
        r = (r - r.mean()) / sd if sd > 0 else np.zeros_like(r)
    elif norm != "none":
        raise PrbenchError(f"unknown reward_norm {norm!r} (use {', '.join(REWARD_NORMS)})")
    return r, n_bad



def load_guiding_rm(rm: str | RewardModel, seed: int, options: dict[str, Any] | None, purpose: str) -> PointwiseRM:
    """The RM that steers decoding: a spec or an object, which must score single texts."""
    rm_obj = rm if isinstance(rm, RewardModel) else load_rm(rm, **{"seed": seed, **(options or {})})
    if not isinstance(rm_obj, PointwiseRM):
        raise PrbenchError(f"{rm_obj.spec}: {purpose} needs a pointwise RM (a score per text)")
    return rm_obj
