"""`prbench export openrlhf|verl`: prompt datasets for RL frameworks, with the reward's user context;
`prbench export eee`: finished runs in the Every Eval Ever result schema."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prbench.cli.options import Data, Json, Limit, Retriever, RMCondition, Seed, Split, TopK
from prbench.cli.output import emit_json

app = typer.Typer(help="Write RL prompt sets or finished runs. OpenRLHF and verl prompt "
                       "datasets (docs/rl.md); runs in the Every Eval Ever schema.", no_args_is_help=True)

OutFile = Annotated[Path, typer.Option("--out", "-o", help="Output file.")]
PolicyCondition = Annotated[str, typer.Option(help="What the policy's prompt shows: profile or none.")]
MaxWords = Annotated[int, typer.Option(help="Word limit stated in the policy prompt.")]


def _run(kind: str, data: str, out: Path, condition: str, policy_condition: str, top_k: int, retriever: str,
         max_words: int, seed: int, limit: int | None, split: str, json_out: bool) -> None:
    from prbench.downstream.sampling import load_items
    from prbench.integrations import export

    items = load_items(data, limit=limit, split=split)
    rows_of = export.verl_rows if kind == "verl" else export.openrlhf_rows
    rows = rows_of(items, condition=condition, policy_condition=policy_condition, top_k=top_k, retriever=retriever,
                   max_words=max_words, seed=seed)
    if kind == "verl":
        path = export.write_parquet(rows, out)
        from prbench.integrations import verl

        hook_file = verl.__file__
    else:
        path = export.write_jsonl(rows, out)
        from prbench.integrations import openrlhf

        hook_file = openrlhf.__file__
    info = {"path": str(path), "rows": len(items), "condition": condition, "reward_file": hook_file}
    if json_out:
        emit_json(info)
    else:
        typer.echo(f"wrote {len(items)} rows to {path}; reward file: {hook_file}")


@app.command("openrlhf")
def openrlhf(data: Data = "sample", out: OutFile = Path("prbench-openrlhf.jsonl"), condition: RMCondition = "profile",
             policy_condition: PolicyCondition = "profile", top_k: TopK = 10, retriever: Retriever = "bm25",
             max_words: MaxWords = 100, seed: Seed = 0, limit: Limit = None, split: Split = "train",
             json_out: Json = False) -> None:
    """Write OpenRLHF prompts. JSONL with JSON labels (--data.input_key prompt --data.label_key label)."""
    _run("openrlhf", data, out, condition, policy_condition, top_k, retriever, max_words, seed, limit, split,
         json_out)


@app.command("verl")
def verl(data: Data = "sample", out: OutFile = Path("prbench-verl.parquet"), condition: RMCondition = "profile",
         policy_condition: PolicyCondition = "profile", top_k: TopK = 10, retriever: Retriever = "bm25",
         max_words: MaxWords = 100, seed: Seed = 0, limit: Limit = None, split: Split = "train",
         json_out: Json = False) -> None:
    """Write verl parquet. data_source, prompt, reward_model.ground_truth and extra_info (question, profile, id)."""
    _run("verl", data, out, condition, policy_condition, top_k, retriever, max_words, seed, limit, split, json_out)


@app.command("eee")
def eee(runs: Annotated[list[Path], typer.Argument(help="Run folders or folders of runs.")],
        out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("eee"),
        json_out: Json = False) -> None:
    """Write runs in the Every Eval Ever schema (v0.3.0). One aggregate JSON and one instance JSONL per run."""
    from prbench.eee import export_eee

    res = export_eee(runs, out)
    if json_out:
        emit_json(res)
        return
    for line in res["not_exported"]:
        typer.echo(f"note: not exported: {line}", err=True)
    typer.echo(f"wrote {len(res['written']) // 2} evaluations to {out}")
