"""`prbench plan`: profile -> expected aspects for the `planner` condition; `prbench plan train`: SFT a planner.

    prbench plan --planner openai:gpt-4o-mini --data sample --out planner.jsonl
    prbench eval -m judge:openai:gpt-4o-mini -c planner --planner-file planner.jsonl
    prbench plan train --base-model builtin:smollm2-135m-instruct --data lamp_train.jsonl --out planner-sft --steps 200

`prbench plan` itself runs the planner (the group's callback, so no sub-command is needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import (
    ApiKeyEnv,
    BaseUrl,
    Device,
    Dtype,
    Json,
    Limit,
    Quiet,
    Retriever,
    Seed,
    TopK,
    engine_options,
    settings_command,
)
from prbench.cli.output import emit_json, progress, table
from prbench.config import PlanSettings
from prbench.errors import PrbenchError

app = typer.Typer(help="Planner: profile -> expected aspects. What the planner condition shows.")

PlannerSpec = Annotated[str | None, typer.Option(
    "--planner", "-p", help="Engine spec of the planner LLM: openai:MODEL, hf:DIR, builtin:smollm2-135m-instruct, vllm:ID.")]
PlanData = Annotated[str, typer.Option("--data", "-d", help="Benchmark or LaMP-QA-form source: file, folder, hub id, 'sample'.")]
PlanOut = Annotated[Path | None, typer.Option("--out", "-o", help="Planner output JSONL (appended to; resumable).")]
MaxAspects = Annotated[int, typer.Option(help="At most this many aspects per example.")]
MaxNewTokens = Annotated[int, typer.Option(help="Generation budget of the planner.")]
PromptFile = Annotated[str | None, typer.Option(help="Your own planner prompt ({{question}}, {{context}}, {{max_aspects}}).")]
NoCache = Annotated[bool, typer.Option(help="Do not read or write the prbench call cache.")]


@app.callback(invoke_without_command=True)
@settings_command(settings=PlanSettings)
def plan_cmd(
    ctx: typer.Context,
    settings: PlanSettings,
    planner: PlannerSpec = None,
    data: PlanData = "sample",
    out: PlanOut = None,
    max_aspects: MaxAspects = 6,
    max_new_tokens: MaxNewTokens = 384,
    prompt_file: PromptFile = None,
    device: Device = None,
    dtype: Dtype = None,
    base_url: BaseUrl = None,
    api_key_env: ApiKeyEnv = None,
    no_cache: NoCache = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Predict each user's expected aspects. From their top-k profile posts into a JSONL file (resumable)."""
    if ctx.invoked_subcommand is not None:
        return
    from prbench.capabilities.plan.driver import plan
    from prbench.capabilities.plan.planner import Planner
    from prbench.store.cache import Cache, NullCache

    if not planner or out is None:
        raise PrbenchError("prbench plan needs --planner SPEC and --out FILE (see prbench plan --help)")
    cache = NullCache() if no_cache else Cache(namespace="planner")
    pl = Planner(planner, prompt_file=prompt_file, max_aspects=max_aspects, max_new_tokens=max_new_tokens,
                 cache=cache, engine_options=engine_options(planner, device=device, dtype=dtype, base_url=base_url,
                                                api_key_env=api_key_env, batch_size=settings.batch_size))
    with progress(quiet or json_out) as bar:
        task = bar.add_task(f"planning with {planner}", total=None)
        res = plan(pl, data, out, settings=settings, cache=cache,
                   on_progress=lambda d, t: bar.update(task, completed=d, total=t))
    summary = {"path": str(res.path), "written": res.written, "skipped": res.skipped, "failures": res.failures,
               **res.info}
    if json_out:
        emit_json(summary)
    elif not quiet:
        table(f"planner output: {res.path}", ["statistic", "value"],
              [(k, summary[k]) for k in ("written", "skipped", "failures", "retried", "recovered_by_retry",
                                         "cache_hits", "prompt_hash")])


@app.command("train")
def train_cmd(
    base_model: Annotated[str, typer.Option(help="Causal LM to fine-tune: local dir, hub id, hf:DIR or builtin:NAME.")],
    data: Annotated[str, typer.Option("--data", "-d", help="LaMP-QA-form items with rubric aspects (not your eval items).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the trained planner (use as hf:<out>).")],
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 200,
    lora: Annotated[bool, typer.Option(help="LoRA adapters (merged before saving) instead of full fine-tuning.")] = True,
    top_k: TopK = 10,
    retriever: Retriever = "bm25",
    lr: Annotated[float | None, typer.Option(help="Learning rate (default 2e-4 with LoRA, 2e-5 without).")] = None,
    batch_size: Annotated[int, typer.Option(help="Items per device step.")] = 4,
    max_length: Annotated[int, typer.Option(help="Token budget per training example.")] = 2048,
    limit: Limit = None,
    split: Annotated[str, typer.Option(help="Split to read: of a hub dataset, or the rows of a local file that name a `split`.")] = "train",
    seed: Seed = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda:N (then the only GPU used; many GPUs: accelerate launch).")] = "auto",
    json_out: Json = False,
) -> None:
    """Fine-tune a planner with TRL. Supervised on (question + posts -> true rubric)."""
    from prbench.capabilities.plan.planner import train_planner
    from prbench.train import is_main_process

    facts = train_planner(base_model, data, out, steps=steps, lora=lora, top_k=top_k, retriever=retriever,
                          learning_rate=lr, batch_size=batch_size, max_length=max_length, limit=limit, split=split,
                          seed=seed, device=device)
    if not is_main_process():  # a launched run's other ranks trained; rank 0 saved and reports
        return
    if json_out:
        emit_json({"out": str(out), **facts})
    else:
        typer.echo(f"saved planner to {out} (use --planner hf:{out}); loss {facts['first_loss']} -> "
                   f"{facts['final_loss']} over {facts['steps']} steps on {facts['train_items']} items")
