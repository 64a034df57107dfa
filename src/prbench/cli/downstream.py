"""`prbench sample`, `prbench serve-reward`: downstream validation.

Plain functions: `prbench.cli.COMMANDS` and the run kinds' `command` name them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prbench.cli.options import (
    RMCondition,
    RMView,
    ServeScale,
    set_options,
    settings_command,
)
from prbench.config import EngineAccess


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"




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
