"""Policy accuracy: does the reward-guided policy prefer the chosen response over the rejected one?

Paper B's metric (its exact formula is not available to us); the definition used here:

Let the policy's prompt be x (the RGD prompt: question + top-k profile posts) and a response
be the tokens t_1..t_n (tokenized in context after the chat's generation prompt, as
`Engine.loglik` does; no end-of-turn token). At position i, with prefix y_<i = t_1..t_(i-1):

1. Policy logits at i, optionally with the repetition penalty over x + y_<i (default 1.0: the
   model's own distribution); `log p(j) = log_softmax(logits)_j` over the full vocabulary.
2. Candidate set C_i = top-k tokens by logit  UNION  {t_i}: the actual token is always added so
   its guided probability is defined even when the policy would never propose it (|C_i| is k
   or k + 1; how often t_i was inside the top-k is reported as `topk_coverage`).
3. Guided logit of j in C_i: g_j = log p(j) + w * r(y_<i + j), with r the RM's score of the
   decoded text prefix (text level, special tokens skipped, whitespace stripped: the same
   reward `rgd` uses) under the RM's condition view; `reward_norm` "zscore" standardises the
   rewards across C_i first. Invalid rewards take the mean of the valid ones in C_i.
4. Guided log-probability of t_i:
   - mode "topk" (ARGS as a distribution): log softmax over C_i,
     `g_(t_i) - logsumexp_(j in C_i) g_j`. At w = 0 this is log p(t_i) - log P(C_i), which is
     NOT the plain policy (renormalising over C_i inflates tokens outside the policy's top-k).
   - mode "full" (default; mass-preserving): the full-vocabulary distribution in which the
     policy's probability mass of C_i is kept and redistributed inside C_i by the guided
     logits, tokens outside C_i keeping p(j):
     `g_(t_i) + (logsumexp_(j in C_i) log p(j) - logsumexp_(j in C_i) g_j)`.
     At w = 0 this is exactly log p(t_i) (bit for bit: the RM is not called and the correction
     term is x - x = 0), so any gap to the plain policy is the RM's doing.
5. Guided log-likelihood of a response = sum over i; length-normalised = mean over tokens.

Policy accuracy = share of pairs where chosen's guided log-likelihood exceeds rejected's, ties
0.5 (`metrics.pair_outcomes`), both for totals and for per-token means, with seeded bootstrap
CIs. The plain policy's preference (w = 0, full-vocabulary softmax) is reported beside it, and
the RM's own preference on the full texts (`rm_accuracy`, from the rewards already computed).

Cost: one batched forward pass per group of responses (left padded, no KV cache needed); all
candidate prefixes of all positions of the group go to the RM in one deduplicated request
(split into RM batches of `rm_batch_size`), memoised and disk-cached with `prbench eval`'s key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import logsumexp

from prbench.capabilities.policy_accuracy.settings import PolicyAccuracySettings
from prbench.config import GuidanceSpec, PolicyScoringSpec, run_identity
from prbench.context.conditions import View, build_view
from prbench.downstream.decoding import (
    PolicyForward,
    apply_repetition_penalty,
    left_pad,
    load_policy,
    policy_pad_id,
)
from prbench.downstream.generation_runs import context_sources, policy_view
from prbench.downstream.prefix_rewards import PrefixRewards, load_guiding_rm, rm_text, shape_rewards
from prbench.engines.base import Engine
from prbench.errors import PrbenchError
from prbench.prompts import load_prompt
from prbench.rewards.base import RewardModel
from prbench.runtime.extras import require
from prbench.schema import Example
from prbench.stats import metrics
from prbench.store.cache import Cache, NullCache
from prbench.store.records import PolicyAccuracySummary, stamp, typed_summary
from prbench.store.runs import RunDir, slug

MODES = ("full", "topk")
DEFINITION = (
    "guided log p(t_i) over C_i = top-k(policy) U {t_i}, g_j = log p(j) + w * r(prefix + j); "
    "topk: g_t - logsumexp_C g; full: g_t + logsumexp_C log p - logsumexp_C g (w = 0 gives the plain policy); "
    "policy accuracy = share of pairs with guided loglik(chosen) > loglik(rejected), ties 0.5"
)


class PAParams(GuidanceSpec, PolicyScoringSpec):
    """What the scoring pass reads of PolicyAccuracySettings (module docstring)."""


@dataclass
class ResponseScore:
    """Per-token guided and plain log-probabilities of one response."""

    guided: list[float]
    plain: list[float]
    in_topk: int = 0
    full_reward: float | None = None  # the RM's score of the whole response (when w != 0)
    invalid_rewards: int = 0
    truncated: bool = False

    @property
    def n(self) -> int:
        return len(self.plain)

    def total(self, which: str = "guided") -> float:
        return float(sum(getattr(self, which)))

    def mean(self, which: str = "guided") -> float:
        vals = getattr(self, which)
        return float(sum(vals) / len(vals)) if vals else 0.0


@dataclass
class ScoreRequest:
    """A response to score: policy prompt ids, response ids, the RM's view."""

    prompt_ids: list[int]
    response_ids: list[int]
    view: View | None = None
    truncated: bool = False


def guided_logprob(cand_logp: np.ndarray, rewards: np.ndarray, t: int, w: float, mode: str) -> float:
    """Guided log-probability of candidate `t` of one position (module docstring, step 4).

    `cand_logp`: the policy's full-vocabulary log-probs of the candidates; `rewards`: their shaped
    rewards. The full-mode correction is computed before adding it, so at w = 0 it is exactly 0.
    """
    g = cand_logp + w * rewards
    if mode == "topk":
        return float(g[t] - logsumexp(g))
    if mode == "full":
        return float(g[t] + (logsumexp(cand_logp) - logsumexp(g)))
    raise PrbenchError(f"unknown policy-accuracy mode {mode!r} (use {', '.join(MODES)})")


def tokenize_response(engine: Any, messages: list[dict[str, str]], response: str) -> tuple[list[int], list[int], bool]:
    """(prompt ids, response ids, truncated): the response tokenized in context (Engine.loglik's rule).

    With the engine's `max_length`, the prompt loses tokens from the left first.
    """
    from prbench.engines.transformers_engine import split_continuation

    prompt, cont, _ = split_continuation(engine.tokenizer, messages, response)
    max_length = getattr(engine, "max_length", None)
    cut = False
    if max_length is not None and len(prompt) + len(cont) > max_length:
        cut = True
        if len(cont) >= max_length:
            cont = cont[: max_length - 1]
        prompt = prompt[-(max_length - len(cont)) :]
    return prompt, cont, cut


def score_responses(
    engine: Any,
    requests: Sequence[ScoreRequest],
    params: PAParams,
    rewards: PrefixRewards | None = None,
    batch_size: int = 4,
) -> list[ResponseScore]:
    """Guided and plain per-token log-probs for each request.

    The policy runs `batch_size` responses per forward pass; then every candidate prefix of
    every position of *all* requests goes to the RM as one deduplicated request (split only
    into RM batches by `PrefixRewards`). Results do not depend on either batch size.
    """
    if params.w != 0 and rewards is None:
        raise PrbenchError("policy accuracy with w != 0 needs an RM")
    results: list[ResponseScore] = []
    per_row: list[tuple[np.ndarray, list[list[int]], list[int]]] = []
    reqs = list(requests)
    for start in range(0, len(reqs), max(1, batch_size)):
        res, rows = _policy_pass(engine, reqs[start : start + batch_size], params)
        results.extend(res)
        per_row.extend(rows)
    _apply_guidance(engine, reqs, results, per_row, params, rewards if params.w != 0 else None)
    return results


def _policy_pass(engine: Any, reqs: list[ScoreRequest],
                 params: PAParams) -> tuple[list[ResponseScore], list[tuple[np.ndarray, list[list[int]], list[int]]]]:
    """One forward pass: plain log-probs, candidate sets and the candidates' log-probs per response."""
    torch = require("torch", "hf")
    model = engine.model
    device = next(model.parameters()).device
    pad_id = policy_pad_id(engine)
    keep = max(len(r.response_ids) for r in reqs) + 1
    results: list[ResponseScore] = []
    per_row: list[tuple[np.ndarray, list[list[int]], list[int]]] = []  # (cand log p, candidate sets, t index)
    with torch.inference_mode():
        if keep > 1:
            ids, mask, pos = left_pad([r.prompt_ids + r.response_ids for r in reqs], pad_id, device)
            logits, _ = PolicyForward(model)(ids, mask, pos, cache=False, keep=keep)
        for b, req in enumerate(reqs):
            n = len(req.response_ids)
            if n == 0:
                results.append(ResponseScore([], [], truncated=req.truncated))
                per_row.append((np.zeros((0, 0)), [], []))
                continue
            row = logits[b, keep - 1 - n : keep - 1, :]
            target = torch.tensor(req.response_ids, dtype=torch.long, device=device)
            if params.repetition_penalty != 1.0:
                seen = torch.zeros_like(row, dtype=torch.bool)
                seen[:, torch.tensor(req.prompt_ids, dtype=torch.long, device=device)] = True
                for i in range(n - 1):
                    seen[i + 1 :, req.response_ids[i]] = True
                row = apply_repetition_penalty(row, seen, params.repetition_penalty)
            logp = torch.log_softmax(row, dim=-1)
            plain = logp.gather(-1, target[:, None])[:, 0].double().cpu().numpy()
            top = torch.topk(row, min(params.k, row.shape[-1]), dim=-1).indices.cpu().tolist()
            cands, t_index, in_topk = [], [], 0
            for i, t in enumerate(req.response_ids):
                c = list(top[i])
                if t in c:
                    in_topk += 1
                else:
                    c.append(t)
                cands.append(c)
                t_index.append(c.index(t))
            width = max(len(c) for c in cands)
            padded = torch.tensor([c + [c[0]] * (width - len(c)) for c in cands], dtype=torch.long, device=device)
            cand_lp = logp.gather(-1, padded).double().cpu().numpy()
            results.append(ResponseScore(guided=[], plain=plain.tolist(), in_topk=in_topk, truncated=req.truncated))
            per_row.append((cand_lp, cands, t_index))
    return results, per_row


def _apply_guidance(engine: Any, reqs: list[ScoreRequest], results: list[ResponseScore],
                    per_row: list[tuple[np.ndarray, list[list[int]], list[int]]], params: PAParams,
                    rewards: PrefixRewards | None) -> None:
    """Fill each result's guided log-probs (one RM request for all candidate prefixes)."""
    tok = engine.tokenizer
    # rewards for every candidate prefix of every position of every response, in one request
    reward_rows: list[list[np.ndarray] | None] = [None] * len(reqs)
    if rewards is not None:
        queries: list[tuple[View, str]] = []
        spans: list[list[tuple[int, int]]] = []
        for b, req in enumerate(reqs):
            _, cands, _ = per_row[b]
            view = req.view
            if view is None and cands:
                raise PrbenchError("policy accuracy with w != 0 needs a view per response")
            seqs = [req.response_ids[:i] + [j] for i, c in enumerate(cands) for j in c]
            texts = tok.batch_decode(seqs, skip_special_tokens=True) if seqs else []
            row_spans, at = [], len(queries)
            for c in cands:
                row_spans.append((at, at + len(c)))
                at += len(c)
            if view is not None:  # without one there are no candidates, so no texts
                queries.extend((view, rm_text(t)) for t in texts)
            spans.append(row_spans)
        flat = np.asarray(rewards(queries), dtype=np.float64) if queries else np.zeros(0)
        for b in range(len(reqs)):
            reward_rows[b] = [flat[s:e] for s, e in spans[b]]

    for b, res in enumerate(results):
        cand_lp, cands, t_index = per_row[b]
        guided: list[float] = []
        for i, c in enumerate(cands):
            lp = cand_lp[i, : len(c)]
            rows = reward_rows[b]
            if rows is not None:
                r_raw = rows[i]
                shaped, bad = shape_rewards(r_raw, params.reward_norm)
                res.invalid_rewards += bad
                if i == len(cands) - 1:
                    v = r_raw[t_index[i]]
                    res.full_reward = float(v) if math.isfinite(v) else None
            else:
                shaped = np.zeros(len(c))
            guided.append(guided_logprob(lp, shaped, t_index[i], params.w, params.mode))
        res.guided = guided


# ---------------------------------------------------------------------------------------------
# Over a benchmark
# ---------------------------------------------------------------------------------------------


@dataclass
class PAResult:
    """What `policy_accuracy` returns: the summary as its readers' model, the pair records, the folder."""

    summary: PolicyAccuracySummary
    records: list[dict[str, Any]]
    path: Path | None = None
    written: dict[str, Any] = field(default_factory=dict, repr=False)
    """The summary's object as written (key order and number types kept): what `--json` prints."""

    @classmethod
    def of(cls, summary: dict[str, Any], records: list[dict[str, Any]], path: Path | None) -> PAResult:
        typed = typed_summary(summary, (path or Path(".")) / "summary.json", PolicyAccuracySummary)
        return cls(typed, records, path, summary)


def _round(v: float) -> float:
    return float(f"{v:.7g}")


def pa_path(out: str | Path, policy: str, rm: str | None, condition: str, params: PAParams) -> Path:
    tag = f"w{params.w:g}-k{params.k}-{params.mode}"
    if params.reward_norm != "none":
        tag += f"-{params.reward_norm}"
    if params.repetition_penalty != 1.0:
        tag += f"-rp{params.repetition_penalty:g}"
    return Path(out) / "policy-accuracy" / slug(policy) / slug(rm or "none") / condition / tag


def pair_record(ex: Example, chosen: ResponseScore, rejected: ResponseScore) -> dict[str, Any]:
    """Per-pair outcome: guided and plain totals / means and the credits (ties 0.5)."""
    def credit(a: float, b: float) -> float:
        return float(metrics.pair_outcomes([a], [b])[0])

    rec: dict[str, Any] = {
        "id": ex.id, "category": ex.category,
        "n_tokens": {"chosen": chosen.n, "rejected": rejected.n},
        "guided": {"chosen": _round(chosen.total()), "rejected": _round(rejected.total()),
                   "chosen_mean": _round(chosen.mean()), "rejected_mean": _round(rejected.mean())},
        "plain": {"chosen": _round(chosen.total("plain")), "rejected": _round(rejected.total("plain")),
                  "chosen_mean": _round(chosen.mean("plain")), "rejected_mean": _round(rejected.mean("plain"))},
        "credit_total": credit(chosen.total(), rejected.total()),
        "credit_norm": credit(chosen.mean(), rejected.mean()),
        "plain_credit_total": credit(chosen.total("plain"), rejected.total("plain")),
        "plain_credit_norm": credit(chosen.mean("plain"), rejected.mean("plain")),
        "topk_coverage": {"chosen": _round(chosen.in_topk / chosen.n) if chosen.n else None,
                          "rejected": _round(rejected.in_topk / rejected.n) if rejected.n else None},
        "invalid_rewards": chosen.invalid_rewards + rejected.invalid_rewards,
        "truncated": chosen.truncated or rejected.truncated,
    }
    if chosen.full_reward is not None and rejected.full_reward is not None:
        rec["rm_credit"] = credit(chosen.full_reward, rejected.full_reward)
    return rec


def summarize(records: Sequence[dict[str, Any]], *, seed: int, n_boot: int = 1000) -> dict[str, Any]:
    """Policy accuracy (total and length-normalised), the plain policy's, the RM's own, with CIs."""
    def acc(key: str) -> dict[str, Any] | None:
        vals = [r[key] for r in records if r.get(key) is not None]
        return metrics.accuracy_summary(np.array(vals, dtype=float), seed=seed, n_boot=n_boot) if vals else None

    out: dict[str, Any] = {
        "policy_accuracy": {"total": acc("credit_total"), "normalized": acc("credit_norm")},
        "plain_policy_accuracy": {"total": acc("plain_credit_total"), "normalized": acc("plain_credit_norm")},
        "rm_accuracy": acc("rm_credit"),
        "n": len(records),
    }
    if records:
        out["agreement_with_plain"] = {
            "total": float(np.mean([r["credit_total"] == r["plain_credit_total"] for r in records])),
            "normalized": float(np.mean([r["credit_norm"] == r["plain_credit_norm"] for r in records]))}
        shifts = [(r["guided"]["chosen"] - r["guided"]["rejected"]) - (r["plain"]["chosen"] - r["plain"]["rejected"])
                  for r in records]
        out["mean_margin_shift"] = float(np.mean(shifts))  # how far guidance moved loglik(chosen) - loglik(rejected)
        cov = [v for r in records for v in r["topk_coverage"].values() if v is not None]
        out["mean_topk_coverage"] = float(np.mean(cov)) if cov else None
        out["invalid_rewards"] = int(sum(r["invalid_rewards"] for r in records))
        out["truncated_pairs"] = int(sum(bool(r["truncated"]) for r in records))
    return out


def policy_accuracy(
    policy: str | Engine,
    rm: str | RewardModel | None,
    data: str | Sequence[Example] = "sample",
    out: str | Path | None = None,
    *,
    settings: PolicyAccuracySettings | None = None,
    engine_options: dict[str, Any] | None = None,
    rm_options: dict[str, Any] | None = None,
    cache: Cache | None = None,
    overwrite: bool = False,
    exact_out: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> PAResult:
    """Policy accuracy of the RGD-adapted policy on benchmark pairs (module docstring); resumable with `out`."""
    from prbench.data import load_examples
    from prbench.downstream.sampling import policy_messages

    s = PolicyAccuracySettings.build(settings, **options)
    t0 = time.time()
    params = PAParams.build(**s.model_dump(include=set(PAParams.model_fields)))
    if rm is None and s.w != 0:
        raise PrbenchError("policy accuracy with s.w != 0 needs --rm")
    engine = load_policy(policy, engine_options)
    rm_obj = load_guiding_rm(rm, s.seed, rm_options, "policy accuracy") if rm is not None else None
    rm_name = rm_obj.name if rm_obj is not None else None
    examples = (load_examples(data, categories=s.categories, limit=s.limit, split=s.split) if isinstance(data, str)
                else list(data)[:s.limit])
    prompt = load_prompt("policy_answer", s.prompt_file)
    persist = out is not None
    cache = cache if cache is not None else (Cache(namespace="scores") if persist else NullCache())
    cfg = run_identity(s, exclude={"prompt_file"}, policy=getattr(engine, "spec", str(policy)), rm=rm_name,
                       data=data if isinstance(data, str) else "<in-memory>", prompt_hash=prompt.hash,
                       policy_fingerprint=engine.fingerprint(),
                       rm_fingerprint=rm_obj.fingerprint() if rm_obj is not None else None)
    run = None
    if out is not None:  # persist
        path = Path(out) if exact_out else pa_path(out, cfg["policy"], rm_name, s.condition, params)
        run = RunDir(path, cfg, overwrite)
    done = run.done_ids() if run else set()
    todo = [ex for ex in examples if ex.id not in done]
    ret, rcache, planner = context_sources(s.retriever, s.planner_file, persist)
    rewards = PrefixRewards(rm_obj, cache, s.rm_batch_size) if rm_obj is not None and s.w != 0 else None
    fresh: list[dict[str, Any]] = []
    score_s = 0.0
    group = max(1, s.batch_size) * 4  # pairs per RM request and per durable write
    for start in range(0, len(todo), group):
        part = todo[start : start + group]
        reqs: list[ScoreRequest] = []
        for ex in part:
            pv = policy_view(ex, s.policy_condition, retriever=ret, top_k=s.top_k, pool=examples, seed=s.seed, cache=rcache)
            msgs = policy_messages(pv, prompt, s.max_words)
            rv = (build_view(ex, s.condition, retriever=ret, top_k=s.top_k, planner=planner, pool=examples, seed=s.seed,
                             max_context_chars=s.max_context_chars, cache=rcache) if rewards is not None else None)
            for resp in (ex.chosen, ex.rejected):
                p_ids, r_ids, cut = tokenize_response(engine, msgs, resp)
                reqs.append(ScoreRequest(p_ids, r_ids, rv, cut))
        t1 = time.time()
        scores = score_responses(engine, reqs, params, rewards, batch_size=s.batch_size)
        score_s += time.time() - t1
        recs = []
        for j, ex in enumerate(part):
            rec = pair_record(ex, scores[2 * j], scores[2 * j + 1])
            rec["condition"] = s.condition
            recs.append(rec)
        if run:
            run.append(recs)
        fresh.extend(recs)
        if on_progress:
            on_progress(len(done) + start + len(part), len(examples))
    order = {ex.id: i for i, ex in enumerate(examples)}
    records = run.records() if run else fresh
    records = sorted((r for r in records if r["id"] in order), key=lambda r: order[r["id"]])
    if run and records != run.records():
        run.rewrite(records)
    summary = stamp("policy-accuracy", {
        "policy": cfg["policy"], "rm": rm_name, "data": cfg["data"], "condition": s.condition,
        "w": s.w, "k": s.k, "mode": s.mode, "repetition_penalty": s.repetition_penalty, "reward_norm": s.reward_norm,
        "metrics": summarize(records, seed=s.seed, n_boot=s.n_boot),
        "definition": DEFINITION,
        "rewards": rewards.stats.as_dict() if rewards is not None else None,
        "seed": s.seed, "resumed_from": len(done),
        "scoring_seconds": round(score_s, 3),
        "seconds_per_pair": round(score_s / len(todo), 3) if todo else None,
        "wall_time_s": round(time.time() - t0, 3),
    })
    m = summary["metrics"]
    summary["policy_accuracy"] = (m["policy_accuracy"]["total"] or {}).get("accuracy")
    summary["policy_accuracy_normalized"] = (m["policy_accuracy"]["normalized"] or {}).get("accuracy")
    summary["plain_policy_accuracy"] = (m["plain_policy_accuracy"]["total"] or {}).get("accuracy")
    summary["plain_policy_accuracy_normalized"] = (m["plain_policy_accuracy"]["normalized"] or {}).get("accuracy")
    if run:
        if rm_name is not None:
            write_pa_downstream(run.path, summary, records)
        run.write_summary(summary)
    return PAResult.of(summary, records, run.path if run else None)


def write_pa_downstream(path: Path, summary: dict[str, Any], records: Sequence[dict[str, Any]]) -> Path | None:
    """downstream.json of a policy-accuracy run: per-pair credit (total; normalized and the RM's own in extras).

    The same file every downstream kind writes, so exports and other tools read policy accuracy
    like Best-of-N, RL or RGD; meta reads the run's records (its `pa_metric` picks the credit).
    """
    from prbench.downstream.results import DownstreamResult, write_downstream

    per = {str(r["id"]): float(r["credit_total"]) for r in records if r.get("credit_total") is not None}
    total = summary["metrics"]["policy_accuracy"]["total"] or {}
    if not per or total.get("accuracy") is None:
        return None
    extra = {f: summary.get(f) for f in ("policy", "data", "condition", "w", "mode", "reward_norm",
                                         "repetition_penalty", "seed")}
    extra.update(candidates_k=summary.get("k"), metric="policy_accuracy_total",
                 per_item_normalized={str(r["id"]): r["credit_norm"] for r in records
                                      if r.get("credit_norm") is not None},
                 per_item_rm_credit={str(r["id"]): r["rm_credit"] for r in records if r.get("rm_credit") is not None})
    acc = float(total["accuracy"])
    res = DownstreamResult(rm=str(summary["rm"]), setting="policy_accuracy", k=[1], first_k=[acc], expected=[acc],
                           ci_low=[total.get("ci_low")], ci_high=[total.get("ci_high")],
                           per_item={i: {"1": v} for i, v in per.items()}, grader="policy log-likelihood",
                           n_items=len(per), scale="share of pairs the guided policy prefers chosen (ties 0.5)",
                           extra=extra)
    return write_downstream(path, res)
