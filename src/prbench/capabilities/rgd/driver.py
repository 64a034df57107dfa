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
posts through `prbench.context.conditions`, condition `profile` by default); the RM's view is its own
condition's view of the item (`oracle` lets the RM, never the policy, see the rubric).
Outputs are written as a samples folder (`samples.jsonl`, n = 1) that `read_samples`, the
grader and Best-of-N tools read, plus gold-answer metrics and an optional rubric grade,
summarised in `downstream.json` (setting "rgd") for the meta-evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prbench.capabilities.rgd.settings import RGDSettings
from prbench.config import run_identity
from prbench.context.conditions import build_view
from prbench.downstream.decoding import RGDJob, RGDParams, load_policy, resolved_penalty, rgd_decode
from prbench.downstream.generation_runs import (
    GenerationRun,
    GenerationWriter,
    context_sources,
    encode_prompt,
    finish_generation_run,
    generation_record,
    open_generation_run,
    policy_view,
)
from prbench.downstream.prefix_rewards import PrefixRewards, load_guiding_rm, rm_text
from prbench.engines.base import Engine
from prbench.errors import PrbenchError
from prbench.evaluation.scoring import example_seed
from prbench.prompts import load_prompt
from prbench.rewards.base import RewardModel
from prbench.schema import SourceItem
from prbench.store.cache import Cache, NullCache
from prbench.store.runs import slug


def rgd_path(out: str | Path, policy: str, rm: str, condition: str, params: RGDParams) -> Path:
    """out/<policy>/<rm>/<condition>/w<w>-k<k>-c<chunk>[-t<T>][-z]: one folder per setting."""
    tag = f"w{params.w:g}-k{params.k}-c{params.chunk}"
    if params.temperature > 0:
        tag += f"-t{params.temperature:g}"
    if params.reward_norm != "none":
        tag += f"-{params.reward_norm}"
    return Path(out) / slug(policy) / slug(rm) / condition / tag


def run_rgd(
    policy: str | Engine,
    rm: str | RewardModel,
    data: str | Sequence[SourceItem] = "sample",
    out: str | Path | None = None,
    *,
    settings: RGDSettings | None = None,
    engine_options: dict[str, Any] | None = None,
    rm_options: dict[str, Any] | None = None,
    grader: Any = None,
    cache: Cache | None = None,
    overwrite: bool = False,
    exact_out: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> GenerationRun:
    """Generate with reward guidance for each item, store resumably, score against gold / rubric.

    With `out`, results go to `rgd_path(out, ...)` (or `out` itself with `exact_out`); a re-run
    skips finished items. `grader` is a spec string or a `Grader`.
    """
    from prbench.downstream.sampling import load_items

    s = RGDSettings.build(settings, **options)
    t0 = time.time()
    engine = load_policy(policy, engine_options)
    params = RGDParams.build(**{**s.model_dump(include=set(RGDParams.model_fields)),
                                "repetition_penalty": resolved_penalty(engine, s.repetition_penalty)})
    rm_obj = load_guiding_rm(rm, s.seed, rm_options, "reward-guided decoding")
    rm_name = rm_obj.name
    items = (load_items(data, categories=s.categories, limit=s.limit, split=s.split) if isinstance(data, str)
             else list(data)[:s.limit])
    prompt = load_prompt("policy_answer", s.prompt_file)
    persist = out is not None
    cache = cache if cache is not None else (Cache(namespace="scores") if persist else NullCache())
    cfg = run_identity(s, exclude={"prompt_file", "downstream_metric", "encoder", "n_boot"},
                       policy=getattr(engine, "spec", str(policy)), rm=rm_name,
                       data=data if isinstance(data, str) else "<in-memory>",
                       repetition_penalty=params.repetition_penalty or 1.0, n=1, prompt_hash=prompt.hash,
                       policy_fingerprint=engine.fingerprint(), rm_fingerprint=rm_obj.fingerprint())
    path = (Path(out) if exact_out else rgd_path(out, cfg["policy"], rm_name, s.condition, params)) \
        if out is not None else None
    run = open_generation_run(path, cfg, overwrite, items)
    done = run.done_ids() if run else set()
    todo = [it for it in items if it.id not in done]
    ret, rcache, planner = context_sources(s.retriever, s.planner_file, persist)
    rewards = PrefixRewards(rm_obj, cache, s.rm_batch_size)
    writer = GenerationWriter(run, items, len(done), on_progress)
    decode_s, truncated = 0.0, 0
    for start in range(0, len(todo), max(1, s.batch_size)):
        part = todo[start : start + s.batch_size]
        jobs, prompts, cut = _jobs(part, items, s, engine, prompt, (ret, rcache, planner))
        truncated += cut
        t1 = time.time()
        outs = rgd_decode(engine, jobs, params, rewards, batch_size=s.batch_size)
        decode_s += (dt := time.time() - t1)
        writer.add(_records(part, jobs, prompts, outs, params.w, rewards, dt), len(part))
    records, texts = writer.finish()
    summary = finish_generation_run(
        run, records, items, texts, grader=grader, encoder=s.encoder, seed=s.seed, n_boot=s.n_boot,
        downstream_metric=s.downstream_metric if s.w != 0 else "none", rm_name=rm_name, setting="rgd",
        extra_summary={
            "policy": cfg["policy"], "rm": rm_name, "condition": s.condition, "w": s.w, "k": s.k, "chunk": s.chunk,
            "temperature": s.temperature, "repetition_penalty": cfg["repetition_penalty"],
            "reward_norm": s.reward_norm, "rewards": rewards.stats.as_dict(),
            "truncated_prompts": truncated, "resumed_from": len(done), "decode_seconds": round(decode_s, 3),
            "seconds_per_item": round(decode_s / len(todo), 3) if todo else None,
            "changed_share": _changed_share(records),
            "downstream_note": None if s.w != 0 else
            "w = 0 is the plain policy: no downstream.json (it would not describe the RM)",
        },
        downstream_extra={"policy": cfg["policy"], "condition": s.condition, "w": s.w, "candidates_k": s.k,
                          "chunk": s.chunk, "temperature": s.temperature, "reward_norm": s.reward_norm,
                          "seed": s.seed, "rm_fingerprint": cfg["rm_fingerprint"]},
        t0=t0)
    return GenerationRun.of(summary, texts, run.path if run else None, records)


def _jobs(part: Sequence[SourceItem], items: Sequence[SourceItem], s: RGDSettings, engine: Engine, prompt: Any,
          sources: tuple[Any, Any, Any]) -> tuple[list[RGDJob], list[str], int]:
    """Each item's decoding job (prompt ids, the RM's view, its seed), prompt text, and how many prompts were cut."""
    from prbench.downstream.sampling import policy_messages

    ret, rcache, planner = sources
    jobs, prompts, truncated = [], [], 0
    for it in part:
        pv = policy_view(it, s.policy_condition, retriever=ret, top_k=s.top_k, pool=items, seed=s.seed, cache=rcache)
        msgs = policy_messages(pv, prompt, s.max_words)
        ids, cut = encode_prompt(engine, msgs, s.max_new_tokens)
        truncated += cut
        rv = build_view(it, s.condition, retriever=ret, top_k=s.top_k, planner=planner, pool=items, seed=s.seed,
                        max_context_chars=s.max_context_chars, cache=rcache)
        jobs.append(RGDJob(ids, rv, example_seed(s.seed, it.id, "rgd")))
        prompts.append(msgs[0]["content"])
    return jobs, prompts, truncated


def _records(part: Sequence[SourceItem], jobs: list[RGDJob], prompts: list[str], outs: Sequence[Any], w: float,
             rewards: PrefixRewards, seconds: float) -> list[dict[str, Any]]:
    """The generation records of one decoded batch, with the reward of each final answer."""
    recs = []
    for it, job, p, o in zip(part, jobs, prompts, outs):
        final = None
        if w != 0 and o.text.strip():
            if job.view is None:
                raise PrbenchError("reward-guided decoding with w != 0 needs a view per job")
            r = rewards([(job.view, rm_text(o.text))])[0]  # usually memoised: the last candidate scored
            final = r if math.isfinite(r) else None
        recs.append(generation_record(it, p, o.text, o.finish_reason, len(o.token_ids), job.seed, {
            "rgd": {"decision_points": o.decision_points, "changed": o.changed,
                    "invalid_rewards": o.invalid_rewards, "final_reward": final,
                    "seconds": round(seconds / len(part), 3)}}))
    return recs


def _changed_share(records: Sequence[dict[str, Any]]) -> float | None:
    pts = sum(r.get("rgd", {}).get("decision_points", 0) for r in records)
    ch = sum(r.get("rgd", {}).get("changed", 0) for r in records)
    return ch / pts if pts else None


