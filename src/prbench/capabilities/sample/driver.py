"""`sample_policy`: N answers per item from a policy, drawn once and reused by every RM's Best-of-N.

Why once: BoN compares RMs on the *same* candidates; resampling per RM would add policy
noise to RM differences. Each sample is seeded by (seed, item id, sample index), so resuming,
batching or adding items never changes a finished sample. The folder it writes, its reader and
the policy's prompt are `prbench.downstream.sampling`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prbench.config import SampleSettings, run_identity
from prbench.context.conditions import build_view, read_planner_file
from prbench.context.retrieval import load_retriever
from prbench.data import write_examples
from prbench.downstream.sampling import ITEMS_FILE, SamplesDir, SampleSet, policy_messages, read_samples
from prbench.engines.base import Engine, GenParams, load_engine
from prbench.evaluation.scoring import example_seed
from prbench.prompts import load_prompt
from prbench.schema import SourceItem
from prbench.sources import load_items
from prbench.store.cache import Cache, text_hash
from prbench.store.records import stamp


def sample_policy(
    policy: str | Engine,
    data: str | Sequence[SourceItem],
    out: str | Path,
    *,
    settings: SampleSettings | None = None,
    engine_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> SampleSet:
    """Draw `settings.n` answers per item from `policy` into the folder `out` (resumable).

    `settings` (or `options` on top of it) are `SampleSettings`; `engine_options` go to the
    engine `policy` names.
    """
    s = SampleSettings.build(settings, **options)
    t0 = time.time()
    engine = policy if isinstance(policy, Engine) else load_engine(policy, **(engine_options or {}))
    items = (load_items(data, categories=s.categories, limit=s.limit, split=s.split) if isinstance(data, str)
             else list(data)[:s.limit])
    prompt = load_prompt("policy_answer", s.prompt_file)
    cfg = run_identity(s, exclude={"planner_file", "prompt_file"}, policy=getattr(engine, "spec", str(policy)),
                       data=data if isinstance(data, str) else "<in-memory>", categories=s.categories or None,
                       prompt_hash=prompt.hash, policy_fingerprint=engine.fingerprint())
    run = SamplesDir(out, cfg, overwrite)
    write_examples(items, run.path / ITEMS_FILE)  # the items of this (possibly extended) run, for the grader
    done = run.done_ids()
    todo = [it for it in items if it.id not in done]
    ret = load_retriever(s.retriever)
    planner = read_planner_file(s.planner_file) if s.planner_file else None
    rcache = Cache(namespace="retrieval")
    failed = 0
    per_call = max(1, (4 * s.batch_size) // s.n)  # items per engine call: N samples each
    if on_progress:
        on_progress(len(done), len(items))  # the count before the first (slow) engine call
    for start in range(0, len(todo), per_call):
        part = todo[start : start + per_call]
        views = [build_view(it, s.condition, retriever=ret, top_k=s.top_k, planner=planner, pool=items, seed=s.seed,
                            cache=rcache) for it in part]
        msgs = [policy_messages(v, prompt, s.max_words) for v in views]
        prompts, params = [], []
        for it, m in zip(part, msgs):
            for j in range(s.n):
                prompts.append(m)
                params.append(GenParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                        seed=example_seed(s.seed, it.id, f"sample-{j}")))
        gens = engine.generate(prompts, params)
        records = []
        for idx, (it, m) in enumerate(zip(part, msgs)):
            mine = gens[idx * s.n : (idx + 1) * s.n]
            if any(g.error for g in mine):
                failed += 1
                continue
            records.append({
                "id": it.id, "category": it.category, "prompt_hash": text_hash(m[0]["content"]),
                "samples": [{"i": j, "text": g.text.strip(), "finish_reason": g.finish_reason, "n_tokens": g.n_tokens,
                             "seed": params[idx * s.n + j].seed} for j, g in enumerate(mine)],
            })
        run.append(records)
        if on_progress:
            on_progress(len(done) + start + len(part), len(items))
    result = read_samples(run.path)
    run.write_summary(stamp("sample", {
        "policy": cfg["policy"], "n": s.n, "items": len(items), "complete_items": len(result.samples),
        "failed_items": failed, "resumed_from": len(done), "prompt_hash": prompt.hash,
        "wall_time_s": round(time.time() - t0, 3),
        "mean_words": (sum(len(t.split()) for texts in result.samples.values() for t in texts)
                       / max(1, sum(len(texts) for texts in result.samples.values()))),
    }))
    return result
