"""`prbench sample`, `prbench bon`, `prbench rl`, `prbench serve-reward`: downstream validation.

Plain functions: `prbench.cli.COMMANDS` and the run kinds' `command` name them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prbench.cli.options import (
    Json,
    MaxLength,
    MaxUsd,
    Prices,
    Quiet,
    RMCondition,
    RMView,
    ServeScale,
    grader_engine_options,
    set_options,
    settings_command,
)
from prbench.cli.output import emit_json, escape, progress, table
from prbench.config import BonSettings, EngineAccess, GraderAccess, RLSettings


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


@settings_command(settings=BonSettings, access=EngineAccess, grader_access=GraderAccess)
def bon(
    samples: Annotated[Path, typer.Option("--samples", "-s", help="Folder written by `prbench sample`.")],
    rm: Annotated[list[str], typer.Option("--rm", "-m", help="RM spec (repeatable).")],
    grader: Annotated[str, typer.Option("--grader", "-g", help="Grader: openai:MODEL, hf:DIR, builtin:NAME or embedding:ENCODER.")],
    settings: BonSettings,
    access: EngineAccess,
    grader_access: GraderAccess,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results folder (default SAMPLES/bon/CONDITION).")] = None,
    max_length: MaxLength = None,
    mode: Annotated[str | None, typer.Option(help="Judges: must be pointwise for Best-of-N.")] = None,
    grader_narrative: Annotated[bool, typer.Option(help="Also show the grader the user's narrative.")] = False,
    grader_prompt_file: Annotated[str | None, typer.Option(help="Your own grading prompt.")] = None,
    grader_max_new_tokens: Annotated[int, typer.Option(help="Token cap of each grading reply.")] = 512,
    max_usd: MaxUsd = None,
    prices: Prices = None,
    batch: Annotated[bool, typer.Option("--batch", help="Grade through provider batches (API graders; half price).")] = False,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Best-of-N curves per RM on a samples folder. First-k pick, exact expected best-of-k, oracle and random."""
    from prbench.downstream.bon import best_of_n
    from prbench.downstream.grader import load_grader
    from prbench.store.cache import Cache

    out = out or samples / "bon" / settings.condition
    g = load_grader(grader, cache=Cache(namespace="grades"), show_narrative=grader_narrative,
                    prompt_path=grader_prompt_file, max_new_tokens=grader_max_new_tokens,
                    engine_options=grader_engine_options(grader, access, grader_access))
    with progress(quiet or json_out) as bar:  # off a terminal, a line at least every interval while it grades
        task = bar.add_task("bon", total=None)
        res = best_of_n(samples, rm, g, settings=settings, out=out,
                        rm_options=set_options(mode=mode, max_length=max_length, **access.model_dump()),
                        on_progress=lambda msg: bar.update(task, description=f"bon: {escape(msg)}"),
                        max_usd=max_usd, prices=prices, batch=batch)
    s = res.summary
    if json_out:
        emit_json({**s, "path": str(res.path)})
        return
    if quiet:
        return
    ks_ = s["k"]
    rows = []
    for r in s["rms"]:
        if r.get("error"):
            rows.append((r["rm"], "error", r["error"], *[""] * len(ks_)))
            continue
        rows.append((r["rm"], "expected", r["n_items"],
                     *[f"{_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]" for v, lo, hi in zip(r["expected"], r["ci_low"], r["ci_high"])]))
        rows.append(("", "first-k", "", *[_fmt(v) for v in r["first_k"]]))
    rows.append(("<oracle>", "expected", s["n_gradable_items"], *[_fmt(v) for v in s["oracle"]["mean"]]))
    rows.append(("<random>", "expected", s["n_gradable_items"], *[_fmt(v) for v in s["random"]["mean"]]))
    table(f"Best-of-N: mean rubric grade (0-2) [95% CI], condition {settings.condition}",
          ["rm", "curve", "items", *[f"k={x}" for x in ks_]], rows)
    calls = s["grader_calls"]
    typer.echo(f"grader calls: {calls['made']} made vs {calls['naive']} naive ({calls['naive_rule']}); "
               f"{s['grader']['cache_hits']} cache hits; results in {res.path}")


@settings_command(settings=RLSettings, access=EngineAccess, grader_access=GraderAccess)
def rl(
    policy: Annotated[str, typer.Option("--policy", "-p", help="Causal LM to train: hf:DIR, builtin:NAME.")],
    rm: Annotated[str, typer.Option("--rm", "-m", help="RM spec used as the reward.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder.")],
    settings: RLSettings,
    access: EngineAccess,
    grader_access: GraderAccess,
    data: Annotated[str, typer.Option("--data", "-d", help="Training items (file, folder, hub id, 'sample').")] = "sample",
    grader: Annotated[str | None, typer.Option("--grader", "-g", help="Grader of held-out answers (any grader spec, as for bon).")] = None,
    max_length: MaxLength = None,
    mode: Annotated[str | None, typer.Option(help="Judges: must be pointwise.")] = None,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Fine-tune a policy with the RM as reward (TRL GRPO). Then grade it on held-out items."""
    from prbench.downstream.rl import train_rl
    from prbench.train import is_main_process

    gopts = {"engine_options": grader_engine_options(grader, access, grader_access)} if grader else None
    with progress(quiet or json_out or not is_main_process()) as bar:
        task = bar.add_task(f"GRPO with {escape(rm)}", total=settings.steps)
        res = train_rl(policy, rm, data, out, settings=settings, grader=grader, device=access.device or "auto",
                       rm_options=set_options(mode=mode, max_length=max_length, **access.model_dump()),
                       grader_options=gopts, on_progress=lambda done, total: bar.update(task, completed=done))
    s = res.summary
    if not is_main_process():  # a launched run's other ranks trained; rank 0 alone reports
        return
    if json_out:
        emit_json({k: v for k, v in s.items() if k != "log_history"})
        return
    if quiet:
        return
    rewards = [h.get("reward") for h in s["log_history"] if "reward" in h]
    rows = [("steps", settings.steps), ("train / held-out items", f"{s['train_items']} / {s['heldout_items']}"),
            ("mean reward first -> last step", f"{_fmt(rewards[0])} -> {_fmt(rewards[-1])}" if rewards else "-"),
            ("invalid rewards", s["reward"]["invalid"]), ("train time (s)", s["train_time_s"])]
    if "eval" in s:
        rows += [("held-out grade (0-2), trained", _fmt(s["eval"]["mean"])),
                 ("held-out grade (0-2), base", _fmt(s["eval"]["base_mean"]))]
    table(f"RL (GRPO) with {rm} as reward", ["", "value"], rows)
    typer.echo(f"policy in {s['policy_dir']}; results in {res.path}")


@settings_command(view=RMView, access=EngineAccess, scale=ServeScale)
def serve_reward(
    rm: Annotated[str, typer.Option("--rm", "-m", help="Pointwise RM spec to serve.")],
    view: RMView,
    access: EngineAccess,
    scale: ServeScale,
    condition: RMCondition = "none",
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default; others need --allow-remote).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0-65535).")] = 8000,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Allow binding beyond loopback (set a token too).")] = False,
    token_env: Annotated[str, typer.Option(help="Env var holding the bearer token (auth on when it is set; set but empty is an error).")] = "PRBENCH_REWARD_TOKEN",
    require_token: Annotated[bool, typer.Option(help="Refuse to start when the token env var is unset.")] = False,
    policy_template: Annotated[str | None, typer.Option(help="Policy (hf:DIR, builtin:NAME, folder) whose chat template splits OpenRLHF queries at /get_reward.")] = None,
    items: Annotated[str | None, typer.Option(help="Benchmark items, so a /get_reward label may name only an id.")] = None,
    users: Annotated[str | None, typer.Option(help="/classify: the training rows (`prbench export verl` parquet or openrlhf JSONL) whose prompts name the user.")] = None,
    rm_template: Annotated[str | None, typer.Option(help="/classify: the tokenizer (hf:DIR, builtin:NAME, folder) verl renders the RM input with (its reward_model.model_path).")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="/classify: the `model` name to answer to (others get vLLM's 404); default: any.")] = None,
    fallback_reward: Annotated[float, typer.Option(help="/get_reward, /classify: value of an item that cannot be scored (counted in /stats).")] = 0.0,
    reward_scale: Annotated[float, typer.Option(help="/get_reward, /classify: multiply RM scores (the paper used 0.1).")] = 1.0,
    max_batch: Annotated[int, typer.Option(help="Most items per request.")] = 64,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body in bytes.")] = 1_000_000,
    max_connections: Annotated[int, typer.Option(help="Most open connections (more get 503 and are closed).")] = 8192,
    header_timeout: Annotated[float, typer.Option(help="Seconds for a request's headers to arrive.")] = 10.0,
    body_timeout: Annotated[float, typer.Option(help="Seconds for a request's body to arrive (else 408).")] = 30.0,
    idle_timeout: Annotated[float, typer.Option(help="Seconds before an idle keep-alive connection is closed.")] = 5.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve an RM over HTTP for RL frameworks. POST /score, /get_reward (OpenRLHF), /classify and /pooling
    (vLLM's pooling API, verl's Reward Loop); GET /v1/models, /health, /stats."""
    from prbench.serve.batcher import Batching
    from prbench.serve.guard import Limits
    from prbench.serve.server import (
        check_bind,
        check_log_level,
        check_sizes,
        create_app,
        hosts_for,
        serve,
        token_from_env,
    )
    from prbench.sources import load_items

    log_level = check_log_level(log_level)  # before any model loads, as the checks below
    token = token_from_env(token_env, required=require_token)
    check_bind(host, token, allow_remote, port)  # before any model loads: a refused bind costs nothing
    limits = Limits(max_connections=max_connections, header_timeout=header_timeout, body_timeout=body_timeout,
                    idle_timeout=idle_timeout)
    batching = Batching(scale.max_batch_items, scale.max_wait_ms, scale.queue_items)
    check_sizes(max_batch, max_body_bytes, batching)
    rm_options = set_options(mode=view.mode, max_length=view.max_length, batch_size=view.batch_size,
                             engine=scale.engine, **access.model_dump())
    app_options: dict[str, Any] = {"token": token, "max_batch": max_batch, "max_body_bytes": max_body_bytes,
                                   "top_k": view.top_k,  # None: the RM's own view (`RewardService`)
                   "retriever": view.retriever, "planner_file": view.planner_file,
                   "max_context_chars": view.max_context_chars, "items": load_items(items) if items else [],
                   "policy_template": policy_template, "users": users, "rm_template": rm_template,
                   "served_model_name": served_model_name, "fallback_reward": fallback_reward,
                   "reward_scale": reward_scale, "batching": batching, "allowed_hosts": hosts_for(host),
                   "rm_options": rm_options, "body_timeout": body_timeout}
    if scale.replicas > 1:
        _serve_replicas(rm, condition, scale, host, port, app_options)
        return
    app = create_app(rm, condition, **app_options)  # loads and checks the RM before anything is announced
    shown = f"http://{host}:{port}" if host else f"http://*:{port}"

    def ready() -> None:
        typer.echo(f"serving {app.model_name} [{condition}] on {shown} (auth: {'on' if token else 'off'}; "
                   f"/get_reward: {'on' if policy_template else 'needs --policy-template'}; "
                   f"/classify: {'on' if users else 'needs --users and --rm-template'})", err=True)

    stopped_by = serve(app, host=host, port=port, log_level=log_level, limits=limits, on_ready=ready)
    stats = app.service.stats
    how = f" by {signal_name(stopped_by)}" if stopped_by else ""
    typer.echo(f"serve-reward stopped{how}: {stats.requests} requests, {stats.items} items scored, "
               f"{app.batcher.abandoned} abandoned by their clients", err=True)


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _serve_replicas(rm: str, condition: str, scale: ServeScale, host: str, port: int, app_options: dict) -> None:
    """Ray Serve with `scale.replicas` copies, until Ctrl-C or SIGTERM (handlers set after Ray's own)."""
    import signal
    import threading

    from prbench.serve.replicas import start_replicas, stop_replicas

    stop = threading.Event()
    try:
        url = start_replicas(rm, condition, replicas=scale.replicas, gpus_per_replica=scale.gpus_per_replica,
                             host=host, port=port, **app_options)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        typer.echo(f"{scale.replicas} replicas ready at {url}", err=True)
        while not stop.wait(1.0):
            pass
    finally:
        stop_replicas()
