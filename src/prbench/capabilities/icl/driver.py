"""In-context learning (ICL) baseline: the policy shown the user's own examples, no reward model.

Paper B: simply putting the user's examples in the prompt beats every reward-guided method for
3B+ models. Two kinds of examples (`examples`):

- `qa`: the user's past question/answer pairs as few-shot chat turns (user: the past question
  in the policy prompt; assistant: the user's own answer), then the current question. Pairs come
  from profile posts that carry an answer field (`answer`, `response` or `reply`: the post
  text is then the question), else from *other* items of the same `user_id` in the data that
  carry a `gold_answer` (never the item itself, nor an item with the same question). The
  `max_examples` most relevant pairs (retriever ranking of past questions) are shown, most
  relevant last (closest to the new question).
- `posts`: the top-k profile posts in the prompt, i.e. exactly the Best-of-N / RGD policy prompt;
  so with `posts`, ICL is the plain policy (RGD at w = 0 decodes the same tokens when greedy
  with the same repetition penalty).
- `auto` (default): `qa` for items that have pairs, else `posts`; the source used is recorded
  per item.

`with_posts` also shows the top-k posts before the current question in `qa` mode. Decoding goes
through `Engine.generate` (greedy by default, seeded per item when sampled), so API engines work
too. Outputs use the samples-folder layout (n = 1) and are scored like RGD outputs (gold answers,
optional rubric grader); no `downstream.json` is written, because there is no RM to rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prbench.capabilities.icl.settings import ICLSettings
from prbench.config import run_identity
from prbench.context.conditions import build_view
from prbench.context.retrieval import Retriever
from prbench.downstream.generation_runs import (
    GenerationRun,
    GenerationWriter,
    context_sources,
    finish_generation_run,
    generation_record,
    open_generation_run,
    policy_view,
)
from prbench.engines.base import Engine, GenParams, Messages, load_engine
from prbench.errors import PrbenchError
from prbench.evaluation.scoring import example_seed
from prbench.prompts import Prompt, load_prompt
from prbench.schema import ProfilePost, SourceItem
from prbench.store.cache import Cache
from prbench.store.runs import slug

EXAMPLE_SOURCES = ("auto", "qa", "posts")
ANSWER_FIELDS = ("answer", "response", "reply")


def _post_answer(post: ProfilePost) -> str | None:
    extra = post.model_extra or {}
    for name in ANSWER_FIELDS:
        value = extra.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return None


def qa_pairs(item: SourceItem, pool: Sequence[SourceItem], retriever: Retriever, max_examples: int,
             cache: Cache | None = None) -> tuple[list[tuple[str, str]], str, list[str]]:
    """The user's past (question, answer) pairs for `item`: (pairs, where from, their ids).

    Most relevant last. Never the item's own gold answer.
    """
    if max_examples < 1:
        return [], "none", []
    from_posts = [(p, a) for p in item.profile if (a := _post_answer(p))]
    if from_posts:
        answers = {p.id: a for p, a in from_posts}
        ranked = retriever.top_k(item.question, [p for p, _ in from_posts], max_examples, cache)
        return [(p.text, answers[p.id]) for p in reversed(ranked)], "profile", [p.id for p in reversed(ranked)]
    if not item.user_id:
        return [], "none", []
    siblings = [it for it in pool if it.user_id == item.user_id and it.id != item.id
                and it.question.strip() != item.question.strip() and (it.gold_answer or "").strip()]
    if not siblings:
        return [], "none", []
    as_posts = [ProfilePost(id=it.id, text=it.question) for it in siblings]
    ranked = retriever.top_k(item.question, as_posts, max_examples, cache)
    by_id = {it.id: it for it in siblings}
    chosen = [by_id[p.id] for p in reversed(ranked)]
    return [(it.question, it.gold_answer or "") for it in chosen], "same-user items", [it.id for it in chosen]


def icl_messages(item: SourceItem, pairs: Sequence[tuple[str, str]], final_prompt: str, prompt: Prompt,
                 max_words: int) -> Messages:
    """Few-shot chat: each past question as a user turn (policy prompt), the user's answer as the reply."""
    msgs: Messages = []
    for q, a in pairs:
        msgs.append({"role": "user", "content": prompt.render(user_prompt=q, max_words=str(max_words))})
        msgs.append({"role": "assistant", "content": a.strip()})
    msgs.append({"role": "user", "content": prompt.render(user_prompt=final_prompt, max_words=str(max_words))})
    return msgs


def run_icl(
    policy: str | Engine,
    data: str | Sequence[SourceItem] = "sample",
    out: str | Path | None = None,
    *,
    settings: ICLSettings | None = None,
    engine_options: dict[str, Any] | None = None,
    grader: Any = None,
    overwrite: bool = False,
    exact_out: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> GenerationRun:
    """Generate the ICL baseline's answers (resumable with `out`) and score them like RGD outputs.

    The example pool (same-user items) is the whole loaded data before `s.limit`, so limiting
    the run does not remove a user's past answers.
    """
    from prbench.downstream.sampling import load_items

    s = ICLSettings.build(settings, **options)
    t0 = time.time()
    if s.examples not in EXAMPLE_SOURCES:
        raise PrbenchError(f"unknown ICL example source {s.examples!r} (use {', '.join(EXAMPLE_SOURCES)})")
    engine = policy if isinstance(policy, Engine) else load_engine(policy, **(engine_options or {}))
    repetition_penalty = s.repetition_penalty
    if repetition_penalty is None:
        repetition_penalty = float(getattr(getattr(engine, "default_params", None), "repetition_penalty", 1.0) or 1.0)
    pool = (load_items(data, categories=s.categories, split=s.split) if isinstance(data, str) else list(data))
    items = pool[:s.limit] if s.limit is not None else pool
    prompt = load_prompt("policy_answer", s.prompt_file)
    cfg = run_identity(s, exclude={"prompt_file", "encoder", "n_boot"}, policy=getattr(engine, "spec", str(policy)),
                       data=data if isinstance(data, str) else "<in-memory>", repetition_penalty=repetition_penalty,
                       n=1, prompt_hash=prompt.hash, policy_fingerprint=engine.fingerprint())
    path = None if out is None else (
        Path(out) if exact_out else Path(out) / "icl" / slug(cfg["policy"]) / f"{s.examples}-m{s.max_examples}")
    run = open_generation_run(path, cfg, overwrite, items)
    done = run.done_ids() if run else set()
    todo = [it for it in items if it.id not in done]
    ret, rcache, _ = context_sources(s.retriever, None, run is not None)
    writer = GenerationWriter(run, items, len(done), on_progress)
    gen_s, failed = 0.0, 0
    for start in range(0, len(todo), max(1, s.batch_size)):
        part = todo[start : start + s.batch_size]
        asks = [_ask(it, pool, s, prompt, ret, rcache) for it in part]
        params = [GenParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                            repetition_penalty=repetition_penalty, seed=example_seed(s.seed, it.id, "icl"))
                  for it in part]
        t1 = time.time()
        gens = engine.generate([m for m, _ in asks], params)
        gen_s += (dt := time.time() - t1)
        recs = [generation_record(it, "\n".join(x["content"] for x in m), g.text, g.finish_reason, g.n_tokens or 0,
                                  p.seed, {"icl": {**inf, "seconds": round(dt / len(part), 3)}})
                for it, (m, inf), p, g in zip(part, asks, params, gens) if not g.error]
        failed += len(part) - len(recs)
        writer.add(recs, len(part))
    records, texts = writer.finish()
    kinds: dict[str, int] = {}
    for r in records:
        kinds[r["icl"]["kind"]] = kinds.get(r["icl"]["kind"], 0) + 1
    summary = finish_generation_run(
        run, records, items, texts, grader=grader, encoder=s.encoder, seed=s.seed, n_boot=s.n_boot,
        downstream_metric="none", rm_name=None, setting="icl",
        extra_summary={"policy": cfg["policy"], "method": "icl", "examples": s.examples,
                       "max_examples": s.max_examples, "with_posts": s.with_posts,
                       "example_kinds": kinds, "failed_items": failed,
                       "temperature": s.temperature, "repetition_penalty": repetition_penalty,
                       "resumed_from": len(done), "generate_seconds": round(gen_s, 3),
                       "seconds_per_item": round(gen_s / len(todo), 3) if todo else None},
        downstream_extra={}, t0=t0)
    return GenerationRun.of(summary, texts, run.path if run else None, records)


def _ask(it: SourceItem, pool: Sequence[SourceItem], s: ICLSettings, prompt: Any, ret: Any, rcache: Any
         ) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """The messages for one item (its user's past Q/A pairs, or profile posts) and what they were built from."""
    pairs, source, ids = ([], "none", []) if s.examples == "posts" else qa_pairs(it, pool, ret, s.max_examples, rcache)
    if s.examples == "qa" or (s.examples == "auto" and pairs):
        view = (policy_view(it, "profile", retriever=ret, top_k=s.top_k, pool=pool, seed=s.seed, cache=rcache)
                if s.with_posts else build_view(it, "none", retriever=ret))
        return icl_messages(it, pairs, view.prompt(), prompt, s.max_words), {"kind": "qa", "source": source,
                                                                             "example_ids": ids}
    view = policy_view(it, "profile", retriever=ret, top_k=s.top_k, pool=pool, seed=s.seed, cache=rcache)
    return (icl_messages(it, [], view.prompt(), prompt, s.max_words),
            {"kind": "posts", "source": "profile posts", "example_ids": [p.id for p in view.posts]})
