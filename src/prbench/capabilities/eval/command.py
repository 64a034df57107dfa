"""`prbench eval`: the eval capability's command (`prbench leaderboard` and `compare`, which read its runs, are
`prbench.cli.leaderboard`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from rich.markup import escape
from typer.models import CommandInfo

from prbench.capabilities.eval.settings import EvalSettings
from prbench.cli.options import (
    Conditions,
    Data,
    GroupedHelp,
    Json,
    MaxLength,
    MaxUsd,
    ModelOptions,
    NoApiKey,
    NoCache,
    Overwrite,
    Prices,
    Provider,
    Quiet,
    Repair,
    Rpm,
    Tpm,
    model_options,
    settings_command,
    split_csv,
)
from prbench.cli.output import emit_json, progress, table
from prbench.config import EngineAccess
from prbench.errors import BatchPending, InvalidRunError, PrbenchError
from prbench.specs import ModelSpec

MaxInvalid = Annotated[float, typer.Option(help="Fail (exit 1) when the share of invalid records is above this (0-1). "
                                                "A run with every record invalid always fails.")]
Batch = Annotated[bool, typer.Option(
    "--batch", help="Send API requests as provider batches (half price; OpenAI /v1/batches, Anthropic Message "
                    "Batches). Ids are kept in the run folder: a re-run resumes, never resubmits.")]
NoWait = Annotated[bool, typer.Option(
    "--no-wait", help="With --batch: submit, record and exit (code 4); the same command collects later.")]
# the CLI's own forms of EvalSettings.until / until_max (a free-text rule, a count checked by click): one help text
Until = Annotated[str | None, typer.Option(help=EvalSettings.model_fields["until"].description)]
UntilMax = Annotated[int | None, typer.Option(help=EvalSettings.model_fields["until_max"].description, min=1)]
MODEL_HELP = ("Model spec (repeatable): baseline:length|short|random|lexical|embedding, hf:HUB_ID|DIR, "
              "judge:ENGINE, pmi:ENGINE, lik:ENGINE (ENGINE: builtin:NAME, openai:MODEL, vllm:MODEL, ...); "
              "trained by `prbench train`: bt:DIR, pal:DIR, style:DIR, stance:DIR, lore:DIR, pref:DIR, gpo:DIR, "
              "vpl:DIR, synthesizeme:DIR, finetune:DIR, covote-nn:DIR (the reference that trains nothing); your "
              "own: py:FILE:CLASS, or a plug-in's prefix. See "
              "docs/reference/specs.md.")


class EvalHelp(GroupedHelp):
    panel_of: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("model", "model_option", "condition", "out", "data", "format"), "What to score"),
        **dict.fromkeys(("batch_size", "workers", "ray_address", "gpus_per_worker"), "Scale"),
        **dict.fromkeys(("mode", "debias_position", "both_orders", "prompt_file"), "Judges"),
        **dict.fromkeys(("max_length", "trust_remote_code"), "Model loading and access"),
        **dict.fromkeys(("until", "until_max", "max_usd", "prices", "batch", "no_wait", "provider", "rpm", "tpm",
                         "no_api_key"), "Cost and stopping (API calls, --until)"),
        **dict.fromkeys(("overwrite", "retry_failed", "repair", "no_cache", "max_invalid"), "Reruns and failures"),
        **dict.fromkeys(("quiet", "json_out", "help"), "Output"),
    }


EVAL_EXAMPLES = """Examples:

\b
  prbench eval -m baseline:lexical -m baseline:embedding -c none,profile
  prbench eval -m hf:./my-rm --data my.jsonl -c profile --limit 100
  prbench eval -m judge:openai:gpt-5.1 --both-orders --batch --max-usd 5
  prbench eval -m judge:builtin:smollm2-135m-instruct --mode likelihood \\
      --debias-position --limit 12
"""


@settings_command(settings=EvalSettings, access=EngineAccess, exclude=("condition", "until", "until_max"))
def eval_cmd(
    model: Annotated[list[str], typer.Option("--model", "-m", help=MODEL_HELP)],
    settings: EvalSettings,
    access: EngineAccess,
    data: Data = "sample",
    condition: Conditions = "none",
    out: Annotated[Path, typer.Option("--out", "-o", help="Runs folder.")] = Path("runs"),
    max_length: MaxLength = None,
    mode: Annotated[str | None, typer.Option(help="Judges: pairwise, pointwise or likelihood.")] = None,
    debias_position: Annotated[bool, typer.Option(help="Likelihood judges only: average p(A) of both answer orders into one verdict inside the judge (a soft correction; no ties from orders that disagree).")] = False,
    trust_remote_code: Annotated[bool, typer.Option(help="Allow model repos to run their own code.")] = False,
    provider: Provider = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    no_api_key: NoApiKey = False,
    prompt_file: Annotated[str | None, typer.Option(help="Your own judge prompt template.")] = None,
    overwrite: Overwrite = False,
    retry_failed: Annotated[bool, typer.Option(help="Re-run only the items recorded as invalid.")] = False,
    repair: Repair = False,
    no_cache: NoCache = False,
    model_option: ModelOptions = None,
    max_invalid: MaxInvalid = 1.0,
    max_usd: MaxUsd = None,
    prices: Prices = None,
    batch: Batch = False,
    no_wait: NoWait = False,
    until: Until = None,
    until_max: UntilMax = None,
    quiet: Quiet = False,
    json_out: Json = False,
) -> None:
    """Evaluate reward models on a benchmark. One run per model and input condition."""
    from prbench import evaluate, invalid_failure
    from prbench.preflight import check_condition_names, check_data, model_specs
    from prbench.store.cache import NullCache

    if not 0.0 <= max_invalid <= 1.0:  # nan fails this test too
        raise PrbenchError(f"--max-invalid must be a share between 0 and 1, got {max_invalid:g}")
    conds = check_condition_names(split_csv(condition) or ["none"])
    specs = list({m.spec: m for m in model_specs(model).values()}.values())  # parsed once; one identity per model
    check_data(data, settings, conds)  # `-c none,oracle` on data without a rubric: refused before `none` runs
    per_model = model_options(specs, model_option, mode=mode, max_length=max_length,
                              trust_remote_code=trust_remote_code, prompt_file=prompt_file,
                              debias_position=debias_position, provider=provider, rpm=rpm, tpm=tpm,
                              no_api_key=no_api_key, **access.model_dump())
    results: list[Any] = []
    failures, pending = [], []
    settings = EvalSettings.build(settings, until=until, until_max=until_max)
    if until is not None or until_max is not None:  # every run on a growing seeded prefix (prbench.evaluation.until)
        results = _eval_until(specs, conds, per_model, settings, data, out, not no_wait, {
            "overwrite": overwrite, "retry_failed": retry_failed, "repair": repair, "max_usd": max_usd, "prices": prices,
            "cache": NullCache() if no_cache else None, "batch": batch}, quiet or json_out)
        failures = [f for r in results if (f := invalid_failure(r.summary, max_invalid))]
    with progress(quiet or json_out) as bar:
        for spec in specs if until is None and until_max is None else ():
            rm = _handle(spec, per_model[spec.spec], settings)  # built by `evaluate` for the first run that scores
            for cond in conds:
                task = bar.add_task(escape(f"{rm.name} [{cond}]"), total=None)
                try:
                    res = evaluate(rm, data, cond, settings=settings, out=out,
                                   overwrite=overwrite, retry_failed=retry_failed, repair=repair,
                                   cache=NullCache() if no_cache else None, max_usd=max_usd, prices=prices,
                                   batch=batch, wait=not no_wait,
                                   on_progress=lambda d, t, task=task: bar.update(task, completed=d, total=t))
                except BatchPending:  # --no-wait: submit every run's batches, then exit once
                    pending.append(f"{rm.name} [{cond}]")
                    continue
                results.append(res)
                if failure := invalid_failure(res.summary, max_invalid, res.records):
                    failures.append(failure)
                if res.reused and not quiet:
                    _say_reused(res)
    _finish(results, pending, failures, quiet, json_out)


def _handle(spec: ModelSpec, options: dict[str, Any], settings: EvalSettings) -> Any:
    """The model as `evaluate` builds it when a run needs it. Named as its RM reports itself (a pointwise judge:
    `judge[pointwise]:...`), which named `prbench eval`'s run folders when the command built every model first;
    spread over Ray workers, by its spec (each worker builds its own)."""
    from prbench.evaluation.evaluate import ModelHandle
    from prbench.rewards.base import rm_name

    distributed = settings.workers > 1 or settings.ray_address is not None
    return ModelHandle(spec, options, name=None if distributed else rm_name(spec, options))


def _finish(results: list[Any], pending: list[str], failures: list[str], quiet: bool, json_out: bool) -> None:
    """Print the runs (`EvalResult`s), then exit for batches still pending (code 4) or runs with too many invalid
    records (1)."""
    if json_out:
        emit_json([{**r.written, "path": str(r.path)} for r in results])  # each summary as written, with its folder
    elif not quiet:
        _print_runs(results)
    if pending:
        raise BatchPending(f"batches submitted and recorded for {len(pending)} run(s) ({', '.join(pending)}); "
                           "run the same command again to collect them")
    if failures:
        raise InvalidRunError("; ".join(failures) + " (results kept; fix the cause, then rerun with --retry-failed)")


def _eval_until(specs: list[ModelSpec], conds: list[str], per_model: dict[str, dict], settings: EvalSettings, data: str,
                out: Path, wait: bool, kw: dict, quiet: bool) -> list[Any]:
    """`evaluate` under `--until`, each (model, condition) run with its progress bar."""
    from prbench import evaluate
    from prbench.evaluation.until import check_until

    check_until(settings, wait)  # refused before the models are named and the bars drawn
    rms = [_handle(spec, per_model[spec.spec], settings) for spec in specs]
    with progress(quiet) as bar:
        tasks = [bar.add_task(escape(f"{rm.name} [{c}]"), total=None) for rm in rms for c in conds]
        results = evaluate(rms, data, conds, settings=settings, out=out, **kw,
                           on_run_progress=lambda i, d, t: bar.update(tasks[i], completed=d, total=t))
    return list(results)


def _print_runs(results: list[Any]) -> None:
    """The accuracy table of the runs, then each benchmark's own headline (RewardBench sections, RM-Bench grid)."""
    rows, notes = [], []
    runs = [(r.summary, str(r.path)) for r in results]
    for s, path in runs:
        m = s.metrics
        known = m.ci_low is not None and m.ci_high is not None
        ci = f"[{100 * (m.ci_low or 0.0):.1f}, {100 * (m.ci_high or 0.0):.1f}]" if known else "-"
        acc = f"{100 * m.accuracy:.1f}" if m.accuracy is not None else "-"
        who, why = _checks(s, path)
        rows.append((s.model, s.condition, acc + (" seen" if who and who.seen else ""), ci, m.n, m.n_invalid, path))
        if who and who.seen:  # a training person's score is no estimate for a new person (prbench.evaluation.validity)
            notes.append(f"{s.model} [{s.condition}]: {who.text()}: a score on people it was trained on")
        notes += [f"{s.model} [{s.condition}]: not a ranking: {w}" for w in why if not w.startswith("trained on")]
    table("accuracy (%) on pairs, ties 0.5", ["model", "condition", "acc", "95% CI", "n", "invalid", "run"], rows)
    for note in notes:
        typer.echo(note)
    for why in dict.fromkeys(s.sequential.stopped for s, _ in runs if s.sequential is not None):  # one per group
        typer.echo(f"stopped: {why}")
    if any(s.sequential is not None for s, _ in runs):
        typer.echo("(the 95% CI column is the fixed-n bootstrap; the stopping rule used anytime-valid confidence "
                   "sequences, in each summary's `sequential`)")
    for s, _ in runs:
        fs = s.metrics.format_score
        if fs is not None and fs.value is not None:
            typer.echo(f"{s.model} [{s.condition}]: {fs.name} {100 * fs.value:.1f}, by "
                       f"{fs.upstream}; the table's acc is {fs.accuracy_is}")



def _checks(summary: Any, path: Any) -> tuple[Any, list[str]]:
    """(seen vs unseen people, why the number is not a ranking) of a finished run (`prbench.evaluation.validity`)."""
    from prbench.evaluation import validity
    from prbench.runkinds import open_run

    try:
        items = open_run(path).items if path not in (None, "None") else None
    except (PrbenchError, OSError):  # no folder (no --out): the summary's own counts
        items = None
    return validity.people(summary), validity.faults(summary, items)


# The eval kind's command (`prbench.capabilities.eval.kind`): its options grouped in `--help`, examples after them.
EVAL_COMMAND = CommandInfo(cls=EvalHelp, epilog=EVAL_EXAMPLES, callback=eval_cmd)

def _say_reused(res: Any) -> None:
    """One line for a run returned as stored: nothing was scored now, and how to score it again."""
    n_bad, n_all = res.summary.metrics.n_invalid, res.summary.n_total
    typer.echo(f"reused: {res.path} finished earlier with "
               + (f"{n_bad} invalid of {n_all} items, returned as stored; add --retry-failed to score those "
                  "items again" if n_bad else f"{n_all} items, returned as stored; --overwrite scores it again"),
               err=True)
