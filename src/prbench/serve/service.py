"""The reward service: (user context, answer) -> RM score, through `prbench.context.conditions`, no HTTP.

Why: the server's three dialects (`/score`, OpenRLHF's `/get_reward`, vLLM's `/classify`) and the
in-process clients all score through this one object, so the same item gets the same reward by
any route and the same as `prbench eval` (a View per item under the service's one condition).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prbench.context.conditions import CONDITIONS, View, build_view, read_planner_file
from prbench.context.retrieval import Retriever, load_retriever
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, Score, shown_top_k
from prbench.schema import SourceItem
from prbench.serve.chat import ChatSplitter
from prbench.serve.items import item_from_context, parse_label

log = logging.getLogger(__name__)

DEFAULT_FALLBACK_REWARD = 0.0
VIEW_CACHE_ITEMS = 4096               # Views kept (an RL step has batch_size prompts, each sampled n times)
VIEW_CACHE_BYTES = 64 * 1024 * 1024   # ... and at most this much item text (issue 42.13: 0.9 MB items)
NO_TEMPLATE = ("/get_reward needs the policy's chat template to cut the answer out of OpenRLHF's query: "
               "restart serve-reward with --policy-template (the policy's hf:DIR, builtin:NAME or folder)")


class Reject(Exception):
    """The request as a whole is refused with `status` (a 4xx) and `detail`."""

    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status, self.detail = status, detail


class Invalid(Exception):
    """One rollout that cannot be rewarded (it gets the fallback); `reason` is the /stats key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


Pair = tuple[SourceItem, str]


@dataclass
class ServerStats:
    requests: int = 0
    items: int = 0
    invalid: int = 0
    fallback: int = 0
    rejected: int = 0
    invalid_reasons: Counter = field(default_factory=Counter)
    rejected_by_status: Counter = field(default_factory=Counter)

    def count_rejected(self, status: int) -> None:
        self.rejected += 1
        self.rejected_by_status[status] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "items": self.items, "invalid": self.invalid, "fallback": self.fallback,
                "rejected": self.rejected, "rejected_by_status": {str(k): v for k, v in self.rejected_by_status.items()},
                "invalid_reasons": dict(self.invalid_reasons)}


class ViewCache:
    """Views by item digest, least recently used first out, bounded in entries and in item bytes."""

    def __init__(self, max_items: int = VIEW_CACHE_ITEMS, max_bytes: int = VIEW_CACHE_BYTES):
        self.max_items, self.max_bytes = max_items, max_bytes
        self._views: OrderedDict[bytes, tuple[View, int]] = OrderedDict()
        self.bytes = 0

    def get(self, item: SourceItem, build: Any) -> View:
        text = item.model_dump_json().encode()
        key = hashlib.blake2b(text, digest_size=16).digest()  # the key holds 16 bytes, not the item
        hit = self._views.get(key)
        if hit is not None:
            self._views.move_to_end(key)
            return hit[0]
        view = build(item)
        if len(text) <= self.max_bytes:
            self._views[key] = (view, len(text))
            self.bytes += len(text)
            while len(self._views) > self.max_items or self.bytes > self.max_bytes:
                self.bytes -= self._views.popitem(last=False)[1][1]
        return view


def check_reward(fallback_reward: float, reward_scale: float) -> None:
    """A fallback and a scale that give rewards to learn from (checked before any model loads)."""
    if not (math.isfinite(fallback_reward) and math.isfinite(reward_scale)):
        raise PrbenchError("fallback reward and reward scale must be finite numbers")
    if reward_scale <= 0:  # 0 makes every reward 0 (nothing to learn); below 0 rewards what the RM dislikes
        raise PrbenchError(f"--reward-scale must be > 0, got {reward_scale!r}")


class RewardService:
    """Request -> Views (through conditions) -> RM scores; independent of the HTTP layer."""

    def __init__(self, rm: PointwiseRM, condition: str, *, retriever: Retriever | None = None, top_k: int | None = None,
                 planner_file: str | None = None, max_context_chars: int | None = None,
                 items: Sequence[SourceItem] = (), splitter: ChatSplitter | None = None,
                 fallback_reward: float = DEFAULT_FALLBACK_REWARD, reward_scale: float = 1.0,
                 view_cache: ViewCache | None = None):
        if condition not in CONDITIONS:
            raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(CONDITIONS)})")
        if condition == "wrong-profile":
            raise PrbenchError("the reward server does not offer 'wrong-profile' (a benchmark control, not a reward)")
        if condition == "planner" and not planner_file:
            raise PrbenchError("condition 'planner' needs --planner-file (aspects keyed by item id)")
        check_reward(fallback_reward, reward_scale)
        self.rm, self.condition, self.top_k = rm, condition, shown_top_k(top_k, rm)  # eval's rule
        self.retriever = retriever or load_retriever("bm25")
        self.planner = read_planner_file(planner_file) if planner_file else None
        self.max_context_chars = max_context_chars
        self.items: dict[str, SourceItem] = {it.id: it for it in items}
        self.splitter, self.fallback_reward, self.reward_scale = splitter, float(fallback_reward), reward_scale
        self.lock = threading.Lock()
        self.views = view_cache or ViewCache()
        self.stats = ServerStats()

    # -- scoring -----------------------------------------------------------------------------
    def _view(self, item: SourceItem) -> View:
        return build_view(item, self.condition, retriever=self.retriever, top_k=self.top_k, planner=self.planner,
                          max_context_chars=self.max_context_chars)

    def score_pairs(self, pairs: Sequence[Pair]) -> list[Score]:
        """RM scores of (item, answer) pairs; views are built here too, so a worker thread pays for retrieval."""
        if not pairs:
            return []
        with self.lock:  # local models are not thread-safe (the in-process clients share this service)
            batch = [(self.views.get(item, self._view), response) for item, response in pairs]
            scores = list(self.rm.score(batch))
        if len(scores) != len(batch):
            raise PrbenchError(f"{self.rm.spec} returned {len(scores)} scores for {len(batch)} items")
        return scores

    def missing(self, item: SourceItem, *, has_profile: bool = True) -> str | None:
        """What the condition needs and this item lacks (None when it can be scored)."""
        if self.condition == "profile" and not has_profile:
            return "condition 'profile' needs a 'profile' list (or an id in --items)"
        if self.condition == "oracle" and not item.rubric_aspects:
            return "condition 'oracle' needs non-empty 'rubric_aspects'"
        if self.condition == "planner" and (self.planner is None or item.id not in self.planner):
            return f"no planner aspects for id {item.id!r}"
        return None

    # -- replies -----------------------------------------------------------------------------
    def finite(self, score: Score) -> float | None:
        """The reward of one valid score (scaled), or None when the RM gave none or it overflows."""
        value = score.value * self.reward_scale if score.valid else math.nan
        return value if math.isfinite(value) else None

    def count(self, n: int, reasons: Counter, *, fallback: bool) -> None:
        """Items answered and why any of them got no score (the counters of /stats)."""
        self.stats.items += n
        bad = sum(reasons.values())
        self.stats.invalid += bad
        if fallback:
            self.stats.fallback += bad
        self.stats.invalid_reasons.update(reasons)

    def rewards(self, parsed: Sequence[Pair | Invalid], scores: Sequence[Score]) -> tuple[list[float], list[float]]:
        """(rewards, invalid flags) of rollouts: scaled scores, the fallback where none; counted in /stats."""
        values, flags = [self.fallback_reward] * len(parsed), [1.0] * len(parsed)
        reasons: Counter = Counter()
        it = iter(scores)
        for i, x in enumerate(parsed):
            if isinstance(x, Invalid):
                reasons[x.reason] += 1
                log.warning("reward fallback %s for an item: %s (%s)", self.fallback_reward, x.reason, x)
                continue
            s = next(it)
            value = self.finite(s)
            if value is None:
                reasons["rm_failed"] += 1
                log.warning("reward fallback %s for an item: rm_failed (%s)", self.fallback_reward,
                            s.error or "non-finite score")
            else:
                values[i], flags[i] = value, 0.0
        self.count(len(parsed), reasons, fallback=True)
        return values, flags

    # -- OpenRLHF: one rollout ---------------------------------------------------------------
    def rollout(self, query: str, prompt: str | None, label: Any) -> Pair:
        """The item and answer text of one OpenRLHF rollout; `Invalid` when it cannot be rewarded."""
        if self.splitter is None:
            raise Reject(422, NO_TEMPLATE)
        try:
            ctx = parse_label(label)
            item = item_from_context(ctx, self.items or None)
        except ValueError as exc:
            raise Invalid("bad_label", str(exc)) from None
        looked_up = "question" not in ctx  # only an id found in --items gives an item without a question
        if (why := self.missing(item, has_profile=looked_up or isinstance(ctx.get("profile"), list))) is not None:
            raise Invalid("bad_label", why)
        try:
            response = self.splitter.response(query, prompt)
        except ValueError as exc:
            raise Invalid("no_response", str(exc)) from None
        return item, response

    def rollouts(self, query: Sequence[str], prompts: Sequence[str] | None,
                 labels: Sequence[Any] | None) -> list[Pair | Invalid]:
        """Each rollout's (item, answer), or the `Invalid` that gives it the fallback; `Reject` for the request."""
        n = len(query)
        for name, got in (("prompts", prompts), ("labels", labels)):
            if got is not None and len(got) != n:
                raise Reject(422, f"'{name}' has {len(got)} entries for {n} queries")
        if self.splitter is None and n:
            raise Reject(422, NO_TEMPLATE)
        out: list[Pair | Invalid] = []
        none: list[Any] = [None] * n
        for q, p, lab in zip(query, prompts if prompts is not None else none, labels if labels is not None else none):
            try:
                out.append(self.rollout(q, p, lab))
            except Invalid as exc:
                out.append(exc)
        return out

    def reward_rows(self, rows: Sequence[tuple[Mapping[str, Any], str]]) -> list[tuple[float, bool]]:
        """(reward, valid) per (user context, answer) row, scored in this process (the in-process client)."""
        parsed: list[Pair] = []
        for ctx, response in rows:
            try:
                item = item_from_context(ctx, self.items or None)
            except ValueError as exc:
                raise PrbenchError(f"a training row's user context is unusable: {exc}") from None
            if (why := self.missing(item)) is not None:
                raise PrbenchError(f"a training row cannot be rewarded: {why}")
            parsed.append((item, response))
        values, flags = self.rewards(parsed, self.score_pairs(parsed))
        return [(v, f == 0.0) for v, f in zip(values, flags)]
