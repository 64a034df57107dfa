"""Reward-guided decoding (RGD, ARGS-style): a frozen policy steered token by token by an RM.

Definition (what `rgd_decode` computes; paper B names ARGS but publishes no formula):

- The policy's next-token logits are processed first: repetition penalty over the row's own
  prompt + generated tokens (HF's rule: a positive logit is divided by the penalty, a negative
  one multiplied). Default: the engine's own default (1.3 for `builtin:smollm2-135m-instruct`,
  whose greedy output loops without it; 1.0 for other engines). Then `log p = log_softmax`.
- At a *decision point* the candidates are the policy's top-`k` tokens by processed logit. Each
  candidate j gets the guided score `log p(j) + w * r(y + j)`, where `r` is a pointwise RM applied
  at **text level** to the decoded response prefix `y + j` (special tokens skipped, surrounding
  whitespace stripped), viewed under the RM's condition. So the RM never needs the policy's
  tokenizer. An end-of-turn candidate is scored on the unchanged prefix (the finished answer).
- Greedy (`temperature == 0`): the candidate with the highest guided score (ties: the higher
  policy logit). Sampled: a draw from `softmax(guided / temperature)` over the k candidates,
  from a CPU generator seeded by (seed, item id), so batching never changes a sample.
- `chunk` > 1: decision points are the steps 0, chunk, 2*chunk, ...; between them the policy
  decodes greedily (argmax of the processed logits) and the RM is not called. `chunk` = 1 is ARGS.
- `w == 0` with greedy decoding takes the argmax of the processed logits at every step without
  calling the RM: exactly the tokens of `engine.generate` greedy with the same repetition
  penalty (tested).
- `reward_norm`: "none" (ARGS: raw RM units, so a good `w` depends on the RM's scale) or
  "zscore" (rewards standardised across the candidates of each decision point, so one `w`
  means the same push for every RM; a constant reward then adds nothing).
- A reward the RM could not produce (NaN, error) is replaced by the mean of the valid
  candidate rewards at that decision point (no push either way); when none is valid the
  step is pure policy. Both are counted (`invalid_rewards`).

Cost: the policy's forward pass is KV-cached (one token of compute per step, items batched
with left padding and explicit position ids); the candidates of all rows of a step go to the
RM in one call; prefix rewards are memoised in memory and, with a `Cache`, on disk under the
same key as `prbench eval`'s scores (RM fingerprint, view key, text), so re-runs, resumes and
other `w` values reuse them.

The policy's prompt is the Best-of-N sampling prompt (`policy_answer`: question + top-k profile
posts through `prbench.conditions`, condition `profile` by default); the RM's view is its own
condition's view of the item (`oracle` lets the RM, never the policy, see the rubric).
Outputs are written as a samples folder (`samples.jsonl`, n = 1) that `read_samples`, the
grader and Best-of-N tools read, plus gold-answer metrics and an optional rubric grade,
summarised in `downstream.json` (setting "rgd") for the meta-evaluation.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench import metrics
from prbench.cache import Cache, NullCache, content_key, text_hash
from prbench.conditions import CONDITIONS, View, build_view, read_planner_file
from prbench.engines.base import Engine, load_engine
from prbench.errors import PrbenchError
from prbench.extras import require
from prbench.prompts import load_prompt
from prbench.retrieval import load_retriever
from prbench.rewards.base import PointwiseRM, RewardModel, load_rm
from prbench.runs import read_json, slug, write_json_atomic
from prbench.schema import SourceItem
from prbench.scoring import example_seed

REWARD_NORMS = ("none", "zscore")
POLICY_CONDITIONS = ("profile", "none", "wrong-profile")


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


# ---------------------------------------------------------------------------------------------
# The policy: KV-cached stepping over a left-padded batch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RGDParams:
    """Decoding parameters (see the module docstring). `repetition_penalty=None`: the engine's default."""

    w: float = 1.0
    k: int = 10
    chunk: int = 1
    max_new_tokens: int = 128
    temperature: float = 0.0
    repetition_penalty: float | None = None
    reward_norm: str = "none"

    def check(self) -> None:
        if self.k < 1:
            raise PrbenchError("--k must be at least 1")
        if self.chunk < 1:
            raise PrbenchError("--chunk must be at least 1")
        if self.max_new_tokens < 0:
            raise PrbenchError("--max-new-tokens must be >= 0")
        if self.temperature < 0:
            raise PrbenchError("--temperature must be >= 0")
        if not math.isfinite(self.w):
            raise PrbenchError("--w must be finite")
        if self.reward_norm not in REWARD_NORMS:
            raise PrbenchError(f"unknown reward_norm {self.reward_norm!r} (use {', '.join(REWARD_NORMS)})")


def resolved_penalty(engine: Any, value: float | None) -> float:
    """The repetition penalty actually used: the given one, else the engine's default."""
    if value is not None:
        return float(value)
    default = getattr(engine, "default_params", None)
    return float(getattr(default, "repetition_penalty", 1.0) or 1.0)


@dataclass
class RGDJob:
    """One answer to decode: the policy's prompt ids, the RM's view, the per-item sampling seed."""

    prompt_ids: list[int]
    view: View | None
    seed: int = 0


@dataclass
class RGDOutput:
    token_ids: list[int]
    text: str
    finish_reason: str  # stop | length
    decision_points: int = 0
    changed: int = 0  # decision points where the pick differs from the policy's argmax
    invalid_rewards: int = 0


def require_local_policy(engine: Any) -> None:
    """RGD and policy accuracy need the logits: a local transformers engine."""
    if not (hasattr(engine, "model") and hasattr(engine, "tokenizer")):
        raise PrbenchError(f"{getattr(engine, 'spec', engine)}: reward-guided decoding needs a local policy "
                           "with logits (hf:DIR, hf:HUB_ID or builtin:NAME), not an API engine")


def policy_pad_id(engine: Any) -> int:
    """The engine's pad id (TransformersEngine sets one), else the tokenizer's, else 0."""
    pad = getattr(engine, "pad_id", None)
    if pad is None:
        pad = engine.tokenizer.pad_token_id
    return int(pad) if pad is not None else 0


class _Forward:
    """Calls a causal LM across transformers versions (`cache` vs `past_key_values`)."""

    def __init__(self, model: Any):
        params = inspect.signature(model.forward).parameters
        self.model = model
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.position_ids = "position_ids" in params
        self.logits_to_keep = "logits_to_keep" in params

    def __call__(self, ids: Any, mask: Any, pos: Any, cache: Any = None, keep: int = 1) -> tuple[Any, Any]:
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": cache is not False}
        if self.position_ids:
            kw["position_ids"] = pos
        if self.logits_to_keep:
            kw["logits_to_keep"] = keep
        if cache is not None and cache is not False:
            kw[self.cache_arg] = cache
        out = self.model(**kw)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[:, -keep:, :].float(), new_cache


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: Any) -> tuple[Any, Any, Any]:
    """Left-padded ids, attention mask and position ids (0.. over each row's real tokens)."""
    torch = require("torch", "hf")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


def apply_repetition_penalty(logits: Any, seen: Any, penalty: float) -> Any:
    """HF's rule on the tokens in `seen` (bool mask, same shape): positive / penalty, negative * penalty."""
    torch = require("torch", "hf")
    if penalty == 1.0:
        return logits
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)


def _sample_index(scores: np.ndarray, temperature: float, gen: Any) -> int:
    """Inverse-CDF draw from softmax(scores / T) with one uniform from the row's generator."""
    torch = require("torch", "hf")
    z = scores / temperature
    p = np.exp(z - z.max())
    cdf = np.cumsum(p)
    u = float(torch.rand((), generator=gen, dtype=torch.float64)) * cdf[-1]
    return min(int(np.searchsorted(cdf, u, side="right")), len(scores) - 1)


def rgd_decode(
    engine: Any,
    jobs: Sequence[RGDJob],
    params: RGDParams,
    rewards: PrefixRewards | None = None,
    batch_size: int = 8,
) -> list[RGDOutput]:
    """Decode every job with reward guidance (module docstring); jobs are batched `batch_size` at a time."""
    params.check()
    guided = params.w != 0.0
    if guided and rewards is None:
        raise PrbenchError("reward-guided decoding with w != 0 needs an RM")
    require_local_policy(engine)
    out: list[RGDOutput] = []
    for start in range(0, len(jobs), max(1, batch_size)):
        out.extend(_decode_batch(engine, list(jobs[start : start + batch_size]), params, rewards if guided else None))
    return out


def _decode_batch(engine: Any, jobs: list[RGDJob], params: RGDParams, rewards: PrefixRewards | None) -> list[RGDOutput]:
    torch = require("torch", "hf")
    model, tok = engine.model, engine.tokenizer
    device = next(model.parameters()).device
    pad_id = policy_pad_id(engine)
    eos = set(getattr(engine, "eos_ids", None) or ([tok.eos_token_id] if tok.eos_token_id is not None else []))
    penalty = resolved_penalty(engine, params.repetition_penalty)
    fwd = _Forward(model)
    n = len(jobs)
    gens = [torch.Generator(device="cpu").manual_seed(int(j.seed)) if params.temperature > 0 else None for j in jobs]
    resp: list[list[int]] = [[] for _ in jobs]
    finish = ["length"] * n
    active = [True] * n
    stats = [{"decision_points": 0, "changed": 0, "invalid": 0} for _ in jobs]
    if params.max_new_tokens == 0:
        return [RGDOutput([], "", "length") for _ in jobs]

    with torch.inference_mode():
        ids, mask, pos = left_pad([j.prompt_ids for j in jobs], pad_id, device)
        logits, cache = fwd(ids, mask, pos, None, keep=1)
        logits = logits[:, -1, :]
        vocab = logits.shape[-1]
        seen = torch.zeros((n, vocab), dtype=torch.bool, device=device)
        for i, j in enumerate(jobs):
            seen[i, torch.tensor(j.prompt_ids, dtype=torch.long, device=device)] = True
        next_pos = pos[:, -1] + 1
        for step in range(params.max_new_tokens):
            proc = apply_repetition_penalty(logits, seen, penalty)
            argmax = proc.argmax(dim=-1).tolist()
            choice = list(argmax)
            decide = step % params.chunk == 0 and (rewards is not None or params.temperature > 0)
            if decide:
                choice = _decide(engine, jobs, proc, argmax, params, rewards, resp, active, gens, stats)
            for i in range(n):
                if not active[i]:
                    continue
                t = choice[i]
                if t in eos:
                    active[i], finish[i] = False, "stop"
                    continue
                resp[i].append(t)
                seen[i, t] = True
            if not any(active) or step == params.max_new_tokens - 1:
                break
            feed = torch.tensor([[choice[i] if active[i] else pad_id] for i in range(n)], dtype=torch.long,
                                device=device)
            col = torch.tensor([[1 if active[i] else 0] for i in range(n)], dtype=mask.dtype, device=device)
            mask = torch.cat([mask, col], dim=1)
            logits, cache = fwd(feed, mask, next_pos[:, None], cache, keep=1)
            logits = logits[:, -1, :]
            next_pos = next_pos + 1
    texts = tok.batch_decode(resp, skip_special_tokens=True)
    return [RGDOutput(resp[i], texts[i], finish[i], stats[i]["decision_points"], stats[i]["changed"],
                      stats[i]["invalid"]) for i in range(n)]


def _decide(engine: Any, jobs: list[RGDJob], proc: Any, argmax: list[int], params: RGDParams,
            rewards: PrefixRewards | None, resp: list[list[int]], active: list[bool], gens: list[Any],
            stats: list[dict[str, int]]) -> list[int]:
    """One decision point for every active row: top-k candidates, one RM call, guided pick."""
    torch = require("torch", "hf")
    k = min(params.k, proc.shape[-1])
    logp = torch.log_softmax(proc, dim=-1)
    top = torch.topk(proc, k, dim=-1).indices
    cand_lp = logp.gather(-1, top).double().cpu().numpy()
    top = top.cpu().tolist()
    rows = [i for i in range(len(jobs)) if active[i]]
    reward_of: dict[int, np.ndarray] = {}
    if rewards is not None:
        seqs = [resp[i] + [c] for i in rows for c in top[i]]
        texts = engine.tokenizer.batch_decode(seqs, skip_special_tokens=True)
        queries = []
        for r, i in enumerate(rows):
            view = jobs[i].view
            if view is None:
                raise PrbenchError("reward-guided decoding with w != 0 needs a view per job")
            queries.extend((view, rm_text(t)) for t in texts[r * k : (r + 1) * k])
        flat = rewards(queries)
        for r, i in enumerate(rows):
            reward_of[i] = np.asarray(flat[r * k : (r + 1) * k], dtype=np.float64)
    choice = list(argmax)
    for i in rows:
        stats[i]["decision_points"] += 1
        score = cand_lp[i]
        if i in reward_of:
            shaped, bad = shape_rewards(reward_of[i], params.reward_norm)
            stats[i]["invalid"] += bad
            score = score + params.w * shaped
        if params.temperature > 0:
            pick = _sample_index(score, params.temperature, gens[i])
        else:
            pick = int(np.argmax(score))  # first maximum = the higher policy logit on ties
        if i not in reward_of and params.temperature == 0:
            choice[i] = argmax[i]
        else:
            choice[i] = top[i][pick]
        if choice[i] != argmax[i]:
            stats[i]["changed"] += 1
    return choice


# ---------------------------------------------------------------------------------------------
# Running over a dataset: prompts, views, storage, assessment
# ---------------------------------------------------------------------------------------------


def policy_view(item: SourceItem, condition: str, *, retriever: Any, top_k: int, pool: Sequence[SourceItem],
                seed: int, cache: Cache | None) -> View:
    """What the policy sees (never the rubric: the policy is the user-blind part of RGD)."""
    if condition not in POLICY_CONDITIONS:
        raise PrbenchError(f"the policy must not see the rubric: policy condition must be one of "
                           f"{', '.join(POLICY_CONDITIONS)}, got {condition!r}")
    return build_view(item, condition, retriever=retriever, top_k=top_k, pool=pool, seed=seed, cache=cache)


def encode_prompt(engine: Any, messages: list[dict[str, str]], reserve: int) -> tuple[list[int], bool]:
    """Prompt ids as `engine.generate` builds them (left-truncated to leave `reserve` tokens)."""
    ids = engine.encode_chat(messages, True)
    max_length = getattr(engine, "max_length", None)
    if max_length is not None and len(ids) + reserve > max_length:
        keep = max(1, max_length - reserve)
        if len(ids) > keep:
            return ids[-keep:], True
    return ids, False


def gold_or_grade(
    items: Sequence[SourceItem],
    texts: dict[str, str],
    *,
    grader: Any = None,
    encoder: str | None = "builtin:minilm-l6",
    seed: int = 0,
    n_boot: int = 1000,
) -> dict[str, Any]:
    """Gold-answer metrics (when items carry gold answers) and rubric grades (when a grader is given).

    Returns {"gold": GoldResult | None, "grades": {id: score or None}, "grade_summary": ..., "grader": ...}.
    Items without an output are left out of both (counted by the caller).
    """
    from prbench.downstream.gold import score_gold

    done = [it for it in items if it.id in texts]
    out: dict[str, Any] = {"gold": None, "grades": {}, "grade_summary": None, "grader": None}
    if any(it.gold_answer for it in done):
        out["gold"] = score_gold(done, texts, encoder=encoder, seed=seed, n_boot=n_boot)
    if grader is not None:
        gradable = [it for it in done if it.rubric_aspects]
        grades = grader.grade([(it, texts[it.id]) for it in gradable])
        vals = {it.id: (g.score if g.valid else None) for it, g in zip(gradable, grades)}
        out["grades"] = vals
        good = np.array([v for v in vals.values() if v is not None], dtype=float)
        lo, hi = metrics.bootstrap_ci(good, seed=seed, n_boot=n_boot) if good.size else (None, None)
        out["grade_summary"] = {"mean": float(good.mean()) if good.size else None, "ci_low": lo, "ci_high": hi,
                                "n": int(good.size), "n_invalid": int(sum(v is None for v in vals.values())),
                                "n_without_rubric": len(done) - len(gradable), "scale": "mean aspect grade, 0-2"}
        out["grader"] = grader.run_info()
    return out


DOWNSTREAM_METRICS = ("auto", "grade", "rouge1", "rougeL", "embedding", "none")


def downstream_values(assessed: dict[str, Any], metric: str) -> tuple[str, dict[str, float], str, str] | None:
    """(metric, per-item values, grader label, scale) for downstream.json, or None when nothing fits.

    "auto": the rubric grade when a grader ran, else ROUGE-1 against gold answers when present.
    """
    if metric not in DOWNSTREAM_METRICS:
        raise PrbenchError(f"unknown downstream metric {metric!r} (use {', '.join(DOWNSTREAM_METRICS)})")
    if metric == "none":
        return None
    if metric == "auto":
        metric = "grade" if assessed.get("grader") else ("rouge1" if assessed.get("gold") else "none")
        if metric == "none":
            return None
    if metric == "grade":
        if not assessed.get("grader"):
            raise PrbenchError("downstream metric 'grade' needs --grader")
        vals = {i: v for i, v in assessed["grades"].items() if v is not None}
        return "grade", vals, assessed["grader"]["grader"], "mean aspect grade, 0-2"
    gold = assessed.get("gold")
    if gold is None:
        raise PrbenchError(f"downstream metric {metric!r} needs items with gold answers")
    vals = {i: row[metric] for i, row in gold.per_item.items() if row.get(metric) is not None}
    from prbench.downstream.gold import METRIC_SCALES

    return metric, vals, f"gold:{metric}", METRIC_SCALES[metric]


def write_downstream_file(path: Path, rm_name: str, setting: str, values: dict[str, float], grader: str, scale: str,
                          seed: int, n_boot: int, extra: dict[str, Any]) -> Path | None:
    """One value per item (k = [1]) in the meta-evaluation's format; None when no item has a value."""
    from prbench.downstream.results import DownstreamResult, write_downstream

    if not values:
        return None
    arr = np.array(list(values.values()), dtype=float)
    lo, hi = metrics.bootstrap_ci(arr, seed=seed, n_boot=n_boot)
    res = DownstreamResult(rm=rm_name, setting=setting, k=[1], first_k=[float(arr.mean())],
                           expected=[float(arr.mean())], ci_low=[lo], ci_high=[hi],
                           per_item={i: {"1": float(v)} for i, v in values.items()}, grader=grader,
                           n_items=len(values), scale=scale, extra=extra)
    return write_downstream(path, res)


def generation_record(item: SourceItem, prompt_text: str, text: str, finish: str, n_tokens: int, seed: int,
                      extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `samples.jsonl` line with one sample (the Best-of-N samples layout, n = 1)."""
    rec: dict[str, Any] = {"id": item.id, "category": item.category, "prompt_hash": text_hash(prompt_text),
                           "samples": [{"i": 0, "text": text.strip(), "finish_reason": finish,
                                        "n_tokens": n_tokens, "seed": seed}]}
    if extra:
        rec.update(extra)
    return rec


@dataclass
class RGDConfig:
    """What determines an RGD run's outputs (batch sizes do not)."""

    policy: str
    rm: str
    data: str
    condition: str = "none"
    policy_condition: str = "profile"
    w: float = 1.0
    k: int = 10
    chunk: int = 1
    max_new_tokens: int = 128
    temperature: float = 0.0
    repetition_penalty: float = 1.0
    reward_norm: str = "none"
    max_words: int = 100
    top_k: int = 10
    retriever: str = "bm25"
    max_context_chars: int | None = None
    planner_file: str | None = None
    seed: int = 0
    limit: int | None = None
    categories: list[str] | None = None
    split: str = "test"
    n: int = 1  # samples per item: the samples-folder layout read by `read_samples`
    prompt_hash: str = ""
    policy_fingerprint: dict[str, Any] = field(default_factory=dict)
    rm_fingerprint: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 8
    rm_batch_size: int = 64


@dataclass
class GenerationRun:
    """Outputs of `run_rgd` / `run_icl`: the summary, the texts by item id, the folder."""

    summary: dict[str, Any]
    texts: dict[str, str]
    path: Path | None
    records: list[dict[str, Any]] = field(default_factory=list)


def rgd_path(out: str | Path, policy: str, rm: str, condition: str, params: RGDParams) -> Path:
    """out/<policy>/<rm>/<condition>/w<w>-k<k>-c<chunk>[-t<T>][-z]: one folder per setting."""
    tag = f"w{params.w:g}-k{params.k}-c{params.chunk}"
    if params.temperature > 0:
        tag += f"-t{params.temperature:g}"
    if params.reward_norm != "none":
        tag += f"-{params.reward_norm}"
    return Path(out) / slug(policy) / slug(rm) / condition / tag


def load_guiding_rm(rm: str | RewardModel, seed: int, options: dict[str, Any] | None, purpose: str) -> PointwiseRM:
    """The RM that steers decoding: a spec or an object, which must score single texts."""
    rm_obj = rm if isinstance(rm, RewardModel) else load_rm(rm, **{"seed": seed, **(options or {})})
    if not isinstance(rm_obj, PointwiseRM):
        raise PrbenchError(f"{rm_obj.spec}: {purpose} needs a pointwise RM (a score per text)")
    return rm_obj


def context_sources(retriever: str, planner_file: str | None, persist: bool) -> tuple[Any, Cache | None, Any]:
    """(retriever, its cache when results persist, planner outputs) for building policy and RM views."""
    return (load_retriever(retriever), Cache(namespace="retrieval") if persist else None,
            read_planner_file(planner_file) if planner_file else None)


def load_policy(policy: str | Engine, options: dict[str, Any] | None = None) -> Engine:
    engine = policy if isinstance(policy, Engine) else load_engine(policy, **(options or {}))
    require_local_policy(engine)
    return engine


def run_rgd(
    policy: str | Engine,
    rm: str | RewardModel,
    data: str | Sequence[SourceItem] = "sample",
    out: str | Path | None = None,
    *,
    condition: str = "none",
    w: float = 1.0,
    k: int = 10,
    chunk: int = 1,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    repetition_penalty: float | None = None,
    reward_norm: str = "none",
    seed: int = 0,
    limit: int | None = None,
    categories: Sequence[str] | None = None,
    split: str = "test",
    policy_condition: str = "profile",
    top_k: int = 10,
    retriever: str = "bm25",
    max_context_chars: int | None = None,
    planner_file: str | None = None,
    max_words: int = 100,
    prompt_file: str | None = None,
    batch_size: int = 8,
    rm_batch_size: int = 64,
    engine_options: dict[str, Any] | None = None,
    rm_options: dict[str, Any] | None = None,
    grader: Any = None,
    encoder: str | None = "builtin:minilm-l6",
    downstream_metric: str = "auto",
    n_boot: int = 1000,
    cache: Cache | None = None,
    overwrite: bool = False,
    exact_out: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> GenerationRun:
    """Generate with reward guidance for each item, store resumably, score against gold / rubric.

    With `out`, results go to `rgd_path(out, ...)` (or `out` itself with `exact_out`); a re-run
    skips finished items. `grader` is a spec string or a `Grader`.
    """
    from prbench.data import write_examples
    from prbench.downstream.sampling import ITEMS_FILE, SamplesDir, load_items, policy_messages

    t0 = time.time()
    if condition not in CONDITIONS:
        raise PrbenchError(f"unknown condition {condition!r} (use {', '.join(CONDITIONS)})")
    engine = load_policy(policy, engine_options)
    params = RGDParams(w=w, k=k, chunk=chunk, max_new_tokens=max_new_tokens, temperature=temperature,
                       repetition_penalty=resolved_penalty(engine, repetition_penalty), reward_norm=reward_norm)
    params.check()
    rm_obj = load_guiding_rm(rm, seed, rm_options, "reward-guided decoding")
    rm_name = getattr(rm_obj, "name", rm_obj.spec)
    items = (load_items(data, categories=categories, limit=limit, split=split) if isinstance(data, str)
             else list(data)[:limit])
    prompt = load_prompt("policy_answer", prompt_file)
    persist = out is not None
    cache = cache if cache is not None else (Cache(namespace="scores") if persist else NullCache())
    cfg = RGDConfig(policy=getattr(engine, "spec", str(policy)), rm=rm_name,
                    data=data if isinstance(data, str) else "<in-memory>", condition=condition,
                    policy_condition=policy_condition, w=w, k=k, chunk=chunk, max_new_tokens=max_new_tokens,
                    temperature=temperature, repetition_penalty=params.repetition_penalty or 1.0,
                    reward_norm=reward_norm, max_words=max_words, top_k=top_k, retriever=retriever,
                    max_context_chars=max_context_chars, planner_file=planner_file, seed=seed, limit=limit,
                    categories=list(categories) if categories else None, split=split, prompt_hash=prompt.hash,
                    policy_fingerprint=engine.fingerprint(), rm_fingerprint=rm_obj.fingerprint(),
                    batch_size=batch_size, rm_batch_size=rm_batch_size)
    run = None
    if persist:
        path = Path(out) if exact_out else rgd_path(out, cfg.policy, rm_name, condition, params)
        run = SamplesDir(path, asdict(cfg), overwrite)
        if not (run.path / ITEMS_FILE).exists():
            write_examples(items, run.path / ITEMS_FILE)
    done = run.done_ids() if run else set()
    todo = [it for it in items if it.id not in done]
    ret, rcache, planner = context_sources(retriever, planner_file, persist)
    rewards = PrefixRewards(rm_obj, cache, rm_batch_size)
    fresh: list[dict[str, Any]] = []
    decode_s = 0.0
    truncated = 0
    for start in range(0, len(todo), max(1, batch_size)):
        part = todo[start : start + batch_size]
        jobs, prompts = [], []
        for it in part:
            pv = policy_view(it, policy_condition, retriever=ret, top_k=top_k, pool=items, seed=seed, cache=rcache)
            msgs = policy_messages(pv, prompt, max_words)
            ids, cut = encode_prompt(engine, msgs, max_new_tokens)
            truncated += cut
            rv = build_view(it, condition, retriever=ret, top_k=top_k, planner=planner, pool=items, seed=seed,
                            max_context_chars=max_context_chars, cache=rcache)
            jobs.append(RGDJob(ids, rv, example_seed(seed, it.id, "rgd")))
            prompts.append(msgs[0]["content"])
        t1 = time.time()
        outs = rgd_decode(engine, jobs, params, rewards, batch_size=batch_size)
        dt = time.time() - t1
        decode_s += dt
        recs = []
        for it, job, p, o in zip(part, jobs, prompts, outs):
            final = None
            if params.w != 0 and o.text.strip():
                r = rewards([(job.view, rm_text(o.text))])[0]  # usually memoised: the last candidate scored
                final = r if math.isfinite(r) else None
            recs.append(generation_record(it, p, o.text, o.finish_reason, len(o.token_ids), job.seed, {
                "rgd": {"decision_points": o.decision_points, "changed": o.changed,
                        "invalid_rewards": o.invalid_rewards, "final_reward": final,
                        "seconds": round(dt / len(part), 3)}}))
        if run:
            run.append(recs)
        fresh.extend(recs)
        if on_progress:
            on_progress(len(done) + start + len(part), len(items))
    records = _ordered_records(run, fresh, items)
    texts = {r["id"]: r["samples"][0]["text"] for r in records}
    summary = _finish(run, records, items, texts, grader=grader, encoder=encoder, seed=seed, n_boot=n_boot,
                      downstream_metric=downstream_metric if w != 0 else "none", rm_name=rm_name, setting="rgd",
                      extra_summary={
                          "policy": cfg.policy, "rm": rm_name, "condition": condition, "w": w, "k": k, "chunk": chunk,
                          "temperature": temperature, "repetition_penalty": cfg.repetition_penalty,
                          "reward_norm": reward_norm, "rewards": rewards.stats.as_dict(),
                          "truncated_prompts": truncated, "resumed_from": len(done),
                          "decode_seconds": round(decode_s, 3),
                          "seconds_per_item": round(decode_s / len(todo), 3) if todo else None,
                          "changed_share": _changed_share(records),
                          "downstream_note": None if w != 0 else
                          "w = 0 is the plain policy: no downstream.json (it would not describe the RM)",
                      },
                      downstream_extra={"policy": cfg.policy, "condition": condition, "w": w, "candidates_k": k, "chunk": chunk,
                                        "temperature": temperature, "reward_norm": reward_norm, "seed": seed,
                                        "rm_fingerprint": cfg.rm_fingerprint},
                      t0=t0)
    return GenerationRun(summary, texts, run.path if run else None, records)


def _changed_share(records: Sequence[dict[str, Any]]) -> float | None:
    pts = sum(r.get("rgd", {}).get("decision_points", 0) for r in records)
    ch = sum(r.get("rgd", {}).get("changed", 0) for r in records)
    return ch / pts if pts else None


def _ordered_records(run: Any, fresh: list[dict[str, Any]], items: Sequence[SourceItem]) -> list[dict[str, Any]]:
    order = {it.id: i for i, it in enumerate(items)}
    records = run.records() if run else fresh
    return sorted((r for r in records if r["id"] in order), key=lambda r: order[r["id"]])


def _finish(run: Any, records: list[dict[str, Any]], items: Sequence[SourceItem], texts: dict[str, str], *,
            grader: Any, encoder: str | None, seed: int, n_boot: int, downstream_metric: str, rm_name: str | None,
            setting: str, extra_summary: dict[str, Any], downstream_extra: dict[str, Any], t0: float) -> dict[str, Any]:
    """Assess outputs (gold, rubric), write scores.jsonl, downstream.json and summary.json."""
    from prbench.downstream.grader import Grader, load_grader

    grader_obj = None
    if grader is not None:
        grader_obj = grader if isinstance(grader, Grader) else load_grader(
            grader, cache=Cache(namespace="grades") if run else NullCache())
    done_items = [it for it in items if it.id in texts]
    assessed = gold_or_grade(done_items, texts, grader=grader_obj, encoder=encoder, seed=seed, n_boot=n_boot)
    gold = assessed["gold"]
    rows = []
    for it in done_items:
        row: dict[str, Any] = {"id": it.id}
        if gold is not None:
            row["gold"] = gold.per_item.get(it.id)
        if grader_obj is not None:
            row["grade"] = assessed["grades"].get(it.id)
        rows.append(row)
    summary: dict[str, Any] = {
        **extra_summary,
        "n_items": len(items), "n_generated": len(texts), "n_missing": len(items) - len(texts),
        "mean_words": (float(np.mean([len(t.split()) for t in texts.values()])) if texts else None),
        "gold": gold.summary() if gold is not None else None,
        "grade": assessed["grade_summary"], "grader": assessed["grader"],
        "seed": seed, "n_boot": n_boot,
    }
    dpath = None
    picked = downstream_values(assessed, downstream_metric) if rm_name else None
    if run is not None:
        write_json_atomic(run.path / "scores.json", {"rows": rows})
        if picked is not None:
            metric, values, label, scale = picked
            dpath = write_downstream_file(run.path, rm_name, setting, values, label, scale, seed, n_boot,
                                          {**downstream_extra, "metric": metric, "samples": str(run.path),
                                           "n_excluded": {"no_value": len(done_items) - len(values),
                                                          "not_generated": len(items) - len(texts)}})
    summary["downstream"] = str(dpath) if dpath else None
    summary["downstream_metric"] = picked[0] if picked else None
    summary["wall_time_s"] = round(time.time() - t0, 3)
    if run is not None:
        run.write_summary(summary)
    return summary


def read_generations(path: str | Path) -> dict[str, str]:
    """{item id: text} from an RGD or ICL folder (the samples layout, first sample)."""
    from prbench.downstream.sampling import read_samples

    ss = read_samples(path)
    return {i: s[0] for i, s in ss.samples.items()}


def read_summary(path: str | Path) -> dict[str, Any]:
    return read_json(Path(path) / "summary.json")
