"""`prbench train ...`: personalized reward models; and `prbench data synth-users`.

Register with `app.add_typer(train.app, name="train")` and
`data.app.command("synth-users")(train.synth_users)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import Data, Format, Json, Out, Retriever, Seed, TopK, split_csv
from prbench.cli.output import emit_json, table
from prbench.errors import PrbenchError

app = typer.Typer(help="Train personalized reward models (BT, PAL).",
                  no_args_is_help=True)

Condition = Annotated[str, typer.Option("--condition", "-c",
                                        help="What the RM sees of the user: none, profile, planner, oracle.")]
Epochs = Annotated[float | None, typer.Option(help="Training epochs (default depends on the model).")]
Lr = Annotated[float | None, typer.Option(help="Learning rate (default depends on the model).")]
BatchSize = Annotated[int | None, typer.Option(help="Pairs per optimisation step (default depends on the model).")]
EvalData = Annotated[str | None, typer.Option(help="Held-out pairs scored after each epoch (eval_accuracy).")]
PlannerFile = Annotated[Path | None, typer.Option(help="Planner output (JSONL id -> aspects) for --condition planner.")]
Encoder = Annotated[str, typer.Option(help="Frozen sentence encoder: builtin:minilm-l6, or a sentence-transformers dir.")]


def _load(data: str, eval_data: str | None, format_: str | None = None):
    from prbench.data.pairs import load_pairs

    return load_pairs(data, format=format_), (load_pairs(eval_data, format=format_) if eval_data else [])


def _planner(path: Path | None):
    if path is None:
        return None
    from prbench.conditions import read_planner_file

    return read_planner_file(path)


def _report(result, json_out: bool) -> None:
    last = result.log[-1] if result.log else {}
    if json_out:
        emit_json({"out": str(result.out), "final": last, "epochs": result.log})
        return
    keys = [k for k in ("loss", "accuracy", "eval_accuracy") if any(k in r for r in result.log)]
    table(f"trained -> {result.out}", ["epoch", *keys],
          [(r.get("epoch"), *(f"{r[k]:.4f}" if k in r else "" for k in keys)) for r in result.log])


@app.command()
def bt(
    data: Data,
    out: Out,
    format_: Format = None,
    base_model: Annotated[str | None, typer.Option(
        help="AutoModelForSequenceClassification-capable folder or hub id, fine-tuned with TRL.")] = None,
    frozen_encoder: Annotated[bool, typer.Option(
        "--frozen-encoder", help="Instead: train a small BT head over a frozen sentence encoder (fast on CPU).")] = False,
    condition: Condition = "profile",
    eval_data: EvalData = None,
    epochs: Epochs = None,
    lr: Lr = None,
    batch_size: BatchSize = None,
    seed: Seed = 0,
    lora: Annotated[bool, typer.Option(help="Train LoRA adapters (merged into the saved model).")] = False,
    lora_r: Annotated[int, typer.Option(help="LoRA rank.")] = 8,
    max_length: Annotated[int, typer.Option(help="Token limit per input; longer pairs are an error.")] = 2048,
    max_steps: Annotated[int, typer.Option(help="Stop after this many steps (-1: run all epochs).")] = -1,
    top_k: TopK = 10,
    retriever: Retriever = "bm25",
    planner_file: PlannerFile = None,
    encoder: Encoder = "builtin:minilm-l6",
    device: Annotated[str, typer.Option(help="--base-model: auto, cpu or cuda:N (many GPUs: accelerate launch).")] = "auto",
    json_out: Json = False,
) -> None:
    """Train a Bradley-Terry RM on user views. Evaluate the folder as bt:OUT (a --base-model folder also loads as hf:OUT)."""
    pairs, held = _load(data, eval_data, format_)
    planner = _planner(planner_file)
    if frozen_encoder == (base_model is not None):
        raise PrbenchError("give exactly one of --base-model (TRL fine-tuning) or --frozen-encoder")
    if frozen_encoder:
        from prbench.train.bt import ContextBTConfig, train_context_bt

        d = ContextBTConfig
        cfg = ContextBTConfig(condition=condition, retriever=retriever, top_k=top_k, epochs=int(epochs or d.epochs),
                              lr=lr or d.lr, batch_size=batch_size or d.batch_size, seed=seed, encoder=encoder)
        result = train_context_bt(pairs, out, cfg, eval_pairs=held, planner=planner)
    else:
        from prbench.train.bt import BTConfig, train_bt

        d = BTConfig
        cfg = BTConfig(condition=condition, retriever=retriever, top_k=top_k, epochs=epochs or d.epochs,
                       lr=lr or d.lr, batch_size=batch_size or d.batch_size, seed=seed, lora=lora, lora_r=lora_r,
                       max_length=max_length, max_steps=max_steps, device=device)
        result = train_bt(pairs, out, base_model, cfg, eval_pairs=held, planner=planner)
    _report(result, json_out)


@app.command()
def pal(
    data: Data,
    out: Out,
    format_: Format = None,
    arch: Annotated[str, typer.Option(help="pal-a (ideal points) or pal-b (mixture of projections).")] = "pal-a",
    k_prototypes: Annotated[int, typer.Option(help="Number of prototypes K.")] = 8,
    dim: Annotated[int, typer.Option(help="Dimension of the preference space.")] = 32,
    hidden: Annotated[int, typer.Option(help="Hidden units of the projection (0: linear).")] = 0,
    eval_data: EvalData = None,
    adapt_data: Annotated[str | None, typer.Option(
        help="Pairs of new users: their mixture weights are fitted (few-shot) and saved with the model.")] = None,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 40,
    lr: Lr = None,
    batch_size: BatchSize = None,
    seed: Seed = 0,
    encoder: Encoder = "builtin:minilm-l6",
    json_out: Json = False,
) -> None:
    """Train PAL on (user, prompt, chosen, rejected) pairs. Evaluate the folder as pal:OUT."""
    from prbench.data.pairs import load_pairs
    from prbench.train.pal import PALConfig, train_pal

    pairs, held = _load(data, eval_data, format_)
    cfg = PALConfig(arch=arch, k_prototypes=k_prototypes, dim=dim, hidden=hidden, epochs=epochs,
                    lr=lr or PALConfig.lr, batch_size=batch_size or PALConfig.batch_size, seed=seed, encoder=encoder)
    adapt = load_pairs(adapt_data) if adapt_data else []
    _report(train_pal(pairs, out, cfg, eval_pairs=held, adapt_pairs=adapt), json_out)


def synth_users(
    out: Annotated[Path, typer.Argument(help="Output .jsonl, .jsonl.gz, .json or .parquet.")],
    users: Annotated[int, typer.Option(help="Number of users.")] = 48,
    items_per_user: Annotated[int, typer.Option(help="Preference pairs per user.")] = 14,
    dimensions: Annotated[str | None, typer.Option(
        help="Comma-separated preference dimensions (default all): diet,budget,setting,era,mood,social,scope.")] = None,
    posts_per_dim: Annotated[int, typer.Option(help="Profile posts revealing each preference.")] = 2,
    neutral_posts: Annotated[int, typer.Option(help="Profile posts that reveal nothing.")] = 2,
    seed: Seed = 0,
) -> None:
    """Write synthetic planted-preference users. Each user's profile reveals what they prefer."""
    from prbench.data import write_examples
    from prbench.data.synth_users import synth_examples

    items = synth_examples(users, items_per_user, seed=seed, dimensions=split_csv(dimensions),
                           posts_per_dim=posts_per_dim, neutral_posts=neutral_posts)
    n = write_examples(items, out)
    typer.echo(f"wrote {n} items for {users} users to {out}")
