"""`prbench rl`: fine-tune a policy with the RM as reward (TRL GRPO), then grade it on held-out items."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.capabilities.rl.driver import train_rl
from prbench.capabilities.rl.settings import RLSettings
from prbench.cli.options import Json, MaxLength, Quiet, grader_engine_options, set_options, settings_command
from prbench.cli.output import emit_json, escape, progress, table
from prbench.config import EngineAccess, GraderAccess


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


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
