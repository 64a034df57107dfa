"""`prbench train ...`: personalized reward models; and `prbench data synth-users`.

`app` is `prbench train` (`prbench.cli.COMMANDS`); `prbench.cli.data` adds `synth_users` to its group.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prbench.cli.options import (
    Data,
    Format,
    Json,
    Out,
    Seed,
    folder_out,
    set_options,
    settings_command,
    split_csv,
)
from prbench.cli.output import emit_json, table
from prbench.config import (
    ENCODER,
    ENCODER_FIELD,
    MethodView,
    Settings,
    opt,
)
from prbench.errors import PrbenchError, SpecError
from prbench.train.bt import BTConfig
from prbench.train.pal import PALConfig

if TYPE_CHECKING:
    from prbench.train.protocol import ProtocolReport

app = typer.Typer(help="Train personalized reward models, one command per method. With no method (prbench train "
                       "--data D --out DIR), the candidates are cross-validated over the people of D (every person "
                       "held out once) and the best kept; a cheaper one within --margin points of it wins.",
                  invoke_without_command=True)
Epochs = Annotated[float | None, typer.Option(help="Training epochs (default depends on the model).")]
Lr = Annotated[float | None, typer.Option(help="Learning rate (default depends on the model).")]
BatchSize = Annotated[int | None, typer.Option(help="Pairs per optimisation step (default depends on the model).")]
AdaptData = Annotated[str | None, typer.Option(
    help="Pairs of new users: their mixture weights are fitted (few-shot) and saved with the model.")]
PlannerFile = Annotated[Path | None, typer.Option(help="Planner output (JSONL id -> aspects) for --condition planner.")]


TrainSplit = Annotated[str, typer.Option(
    "--split", help="Part of the data to train on (train; test only when you mean to train on the pairs a "
                    "benchmark scores).")]


def _load(data: str, eval_data: str | None, format_: str | None = None, split: str = "train"
          ) -> tuple[list[Any], list[Any]]:
    """Training pairs from the `split` part; --eval-data pairs from the test part (held out)."""
    from prbench.data.pairs import load_pairs, load_training_pairs

    return (load_training_pairs(data, split, format_),
            load_pairs(eval_data, format=format_) if eval_data else [])


def _planner(path: Path | None) -> Any:
    if path is None:
        return None
    from prbench.context.conditions import read_planner_file

    return read_planner_file(path)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _report(result: Any, json_out: bool, protocol: ProtocolReport | None = None, method: str | None = None,
            eval_data: str | None = None) -> None:
    last = result.log[-1] if result.log else {}
    loads_as = _loads_as(result.out)
    warnings = list(protocol.warnings) if protocol else []
    if protocol and protocol.skipped:
        warnings.append(protocol.skipped)
    if json_out:
        emit_json({"out": str(result.out), "method": method, "loads_as": loads_as, "final": last,
                   "epochs": result.log,
                   "protocol": protocol.headline.model_dump() if protocol and protocol.headline else None,
                   "eval_data": protocol.eval_data.model_dump() if protocol and protocol.eval_data else None,
                   "recommendation": protocol.recommendation if protocol else None, "warnings": warnings})
        return
    keys = [k for k in ("loss", "accuracy", "eval_accuracy") if any(k in r for r in result.log)]
    step = max(1, len(result.log) // 10)  # at most about ten rows; the whole log is in train_log.jsonl
    shown = [r for i, r in enumerate(result.log) if i % step == 0 or i == len(result.log) - 1]
    table(f"trained -> {result.out}", ["epoch", *keys],  # None: not measured (a user too small to verify)
          [(r.get("epoch"), *(_cell(r.get(k)) for k in keys)) for r in shown])
    if protocol and protocol.headline:
        _protocol_table(protocol)
    if protocol and protocol.eval_data:
        e = protocol.eval_data
        typer.echo(f"--eval-data: {_pct(e.mean)}% mean over {e.n_users} users (worst decile {_pct(e.worst_decile)}%)")
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    if loads_as:  # a complete command: without --data, eval would score the built-in sample
        typer.echo(f"evaluate with: prbench eval -m {loads_as} --data {eval_data or 'HELD_OUT'} -c none,profile "
                   "--out runs" + ("" if eval_data else "   (HELD_OUT: pairs of users it was not trained on)"))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _protocol_table(protocol: ProtocolReport) -> None:
    """Seen vs unseen users, the k-shot curve and the controls (accuracy %, mean over users)."""
    train, unseen = protocol.train, protocol.unseen
    assert train is not None and unseen is not None  # a protocol with a headline ran
    rows: list[tuple[str, str, str, int | None]] = [("train users, training pairs", _pct(train.mean), "", train.n_users)]
    if protocol.seen:
        s = protocol.seen
        rows.append(("seen users, new questions", _pct(s.mean), _pct(s.worst_decile), s.n_users))
    for c in unseen.curve:
        ci = f" [{_pct(c.ci_low)}, {_pct(c.ci_high)}]" if c.ci_low is not None else ""
        rows.append((f"unseen users, k={c.k} shots", _pct(c.mean) + ci, _pct(c.worst_decile), c.n_users))
    for name, ctl in (protocol.controls or {}).items():
        rows.append((f"control: {name} (unseen)", _pct(ctl.mean), _pct(ctl.worst_decile), ctl.n_users))
    swap = protocol.swap
    if swap is not None and swap.drop is not None:
        rows.append((f"swap test: own - another user's state (k={swap.k})",
                     f"{_pct(swap.drop)} [{_pct(swap.ci_low)}, {_pct(swap.ci_high)}] p={swap.p_value:.2g}",
                     "", swap.n_users))
    table("protocol: accuracy % per user, mean [95% CI over users]", ["measure", "mean", "worst decile", "users"], rows)


def _loads_as(out: str | Path) -> str | None:
    import json

    try:
        meta = json.loads((Path(out) / "prbench_rm.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    spec = meta.get("loads_as", "")
    return spec.split(" or ")[0].replace("<dir>", str(out)) or None


class Check(Settings):
    """How a trained model is checked: held-out pairs, the user-split protocol, and retraining after it."""

    eval_data: str | None = opt(None, "Held-out pairs scored after each epoch (eval_accuracy).")
    protocol: bool = opt(True, "Hold out users and questions, measure seen vs unseen users, k-shot curve and "
                               "controls (protocol.json).")
    refit: bool | None = opt(None, "After the protocol, retrain on all pairs (default: yes, except finetune).")


def _run(method: str, data: str, out: Path, options: dict, check: Check, json_out: bool, format_: str | None = None,
         split: str = "train", **extra: Any) -> None:
    from prbench.train import is_main_process
    from prbench.train.methods import train_method
    from prbench.train.protocol import UserStats

    pairs, held = _load(data, check.eval_data, format_, split)
    result, report = train_method(method, pairs, out, options, run_protocol_check=check.protocol, refit=check.refit,
                                  **extra)
    if not is_main_process():  # a launched run's other ranks trained; rank 0 measures and reports
        return
    if check.eval_data:
        report.eval_data = UserStats.model_validate(_score_eval(method, out, held, options))
    _report(result, json_out, report, method, check.eval_data)


def _score_eval(method: str, out: Path, pairs: list[Any], options: dict) -> dict:
    """Accuracy of the saved model on --eval-data pairs, per user (under the method's condition)."""
    from prbench.rewards import load_rm
    from prbench.rewards.base import DEFAULT_TOP_K, view_top_k
    from prbench.train.methods import spec_for
    from prbench.train.protocol import ProtocolConfig, distribution, pair_credits, per_user

    rm = load_rm(spec_for(method, out))
    cfg = ProtocolConfig(condition=options.get("condition") or "profile",
                         top_k=options.get("top_k") or view_top_k(rm) or DEFAULT_TOP_K)
    credits, users = pair_credits(rm, pairs, cfg.condition, cfg)
    return distribution(per_user(credits, users), seed=0)


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  line: str | None = None) -> str:
    """A library's warning during training as one line (Python's default adds the file, line and source text of
    the library code that warned, which tells a user nothing)."""
    return f"warning: {str(message).strip().splitlines()[0] if str(message).strip() else category.__name__}\n"


@app.callback()
def default(
    ctx: typer.Context,
    data: Annotated[str | None, typer.Option("--data", "-d", help="Training pairs (file or folder).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder.", callback=folder_out)] = None,
    format_: Format = None,
    split: TrainSplit = "train",
    seed: Seed = 0,
    encoder: Annotated[str, typer.Option(help=ENCODER_FIELD.description)] = ENCODER,
    candidates: Annotated[str | None, typer.Option(
        help="Methods the recommendation measures, comma-separated, or 'all' (default: the cheap ones, "
             "`Method.recommend`).", metavar="LIST")] = None,
    folds: Annotated[int | None, typer.Option(
        help="Folds of people (default: 5, or half the people when fewer than 10).", min=2)] = None,
    margin: Annotated[float, typer.Option(
        help="A cheaper method within this many accuracy points of the best is kept.", min=0, max=100)] = 1.0,
    budget: Annotated[float | None, typer.Option(
        help="Seconds the folds may take; a fold that would not fit is cut (at least one runs; said).",
        min=1)] = None,
    protocol: Annotated[bool, typer.Option(
        help="Also run the seen/unseen protocol for the chosen method (protocol.json; one more training).")] = True,
    json_out: Json = False,
) -> None:
    """With no method: cross-validate the candidates over the people of --data, train the best.

    Every person is held out once (k folds by person); each candidate trains on the other people
    and scores the held-out people's pairs (k = 0) with their own profile and, reversed, with a
    stranger's: mirrored accuracy, 50% for a method blind to the person. The best mean over people
    wins, unless a cheaper method is within --margin points of it (then the cheaper). The
    nearest-neighbour reference (covote-nn, trains nothing) is measured in the same folds and
    shown, never chosen."""
    warnings.formatwarning = _warning_line  # every train command (this callback runs before each)
    if ctx.invoked_subcommand is not None:
        return
    if data is None or out is None:
        typer.echo(ctx.get_help())
        if data is None and out is None:
            raise typer.Exit(0)
        raise PrbenchError("prbench train: give both --data and --out (or a method: prbench train lore --help)")
    from prbench.train import is_main_process
    from prbench.train.methods import DEFAULT_METHOD, METHODS, options_for, train_method
    from prbench.train.recommend import CVSettings, recommend

    names = None
    if candidates:
        names = [m for m in METHODS.names() if (METHODS[m].command or m == "context-bt") and m != "covote-nn"] \
            if candidates.strip() == "all" else split_csv(candidates)
    pairs, _ = _load(data, None, format_, split)
    options = {"seed": seed, **({"encoder": encoder} if encoder != ENCODER else {})}  # the default may read no encoder
    settings = CVSettings(folds=folds, margin=margin / 100, budget_s=budget, seed=seed)
    try:
        rec = recommend(pairs, names, options, settings=settings,
                        progress=None if json_out else lambda line: typer.echo(line, err=True))
    except PrbenchError as exc:
        if "at least 4 users" not in str(exc):
            raise
        typer.echo(f"warning: no recommendation by measurement ({exc}); training {DEFAULT_METHOD}", err=True)
        _run(DEFAULT_METHOD, data, out, options_for(DEFAULT_METHOD, options), Check(), json_out, format_=format_,
             split=split)
        return
    if not json_out:
        _recommend_table(rec)
    if rec.warning:
        typer.echo(f"warning: {rec.warning}", err=True)
    result, report = train_method(rec.method, pairs, out, options_for(rec.method, options),
                                  run_protocol_check=protocol, recommendation=rec)
    if is_main_process():
        _report(result, json_out, report, rec.method, None)


def _recommend_table(rec: Any) -> None:
    """One row per candidate and reference rule, then what the choice rests on and why."""
    def ci(c: Any) -> str:
        return f"{_pct(c.mean)} [{_pct(c.ci_low)}, {_pct(c.ci_high)}]" if c.mean is not None else (c.error or "-")

    def spread(c: Any) -> str:
        if not c.fold_means:
            return "-"
        sd = f"sd {_pct(c.fold_sd)}, " if c.fold_sd is not None else ""
        return f"{sd}{_pct(min(c.fold_means))}-{_pct(max(c.fold_means))}"

    rows = [(c.method + (" (reference)" if c.reference else ""), ci(c), spread(c),
             f"{_pct(c.profile_mean)} / {_pct(c.wrong_mean)}", "-" if c.p_best is None else f"{c.p_best:.2f}",
             f"{c.train_seconds:.1f}", c.cost)
            for c in rec.candidates + rec.references]
    table(f"recommendation: cross-validation over people, {rec.folds_run} of {rec.folds} folds",
          ["method", "mirrored % [95% CI]", "over folds", "own / stranger's profile %", "P(best)", "train s",
           "cost"], rows)
    typer.echo("mirrored: each held-out person's pair with their own profile and, reversed, with a stranger's "
               "(profile-blind 50%); the reference trains nothing and is never chosen; train s: all folds")
    typer.echo(f"the choice rests on {rec.scored_people} held-out people of {rec.people} ({rec.folds_rule}; "
               f"every person held out once{'' if not rec.cut else ' in the folds that ran'}; seed {rec.settings.seed})")
    if rec.cut:
        typer.echo(f"cut: {rec.cut}")
    if rec.gap is not None and rec.gap_ci is not None:
        low, high = rec.gap_ci
        typer.echo(f"{rec.runner_up} minus {rec.method}: {100 * rec.gap:+.1f} points per person "
                   f"[{_pct(low)}, {_pct(high)}]; P({rec.method} is best) = {rec.row(rec.method).p_best:.2f}")
    typer.echo(f"recommended: {rec.why}")
    if rec.reference_note:
        typer.echo(f"note: {rec.reference_note}")


@app.command()
@settings_command(settings=BTConfig, check=Check, exclude=("epochs", "lr", "batch_size"))
def bt(
    data: Data,
    out: Out,
    settings: BTConfig,
    check: Check,
    format_: Format = None,
    split: TrainSplit = "train",
    base_model: Annotated[str | None, typer.Option(
        help="AutoModelForSequenceClassification-capable folder or hub id, fine-tuned with TRL.")] = None,
    frozen_encoder: Annotated[bool, typer.Option(
        "--frozen-encoder", help="Instead: train a small BT head over a frozen sentence encoder (fast on CPU).")] = False,
    epochs: Epochs = None,
    lr: Lr = None,
    batch_size: BatchSize = None,
    planner_file: PlannerFile = None,
    encoder: Annotated[str, typer.Option(help=ENCODER_FIELD.description)] = ENCODER,
    json_out: Json = False,
) -> None:
    """Train a Bradley-Terry RM on user views. Evaluate the folder as bt:OUT (a --base-model folder also loads as hf:OUT).

    The frozen-encoder head runs the protocol (seen vs unseen users) unless --no-protocol.
    """
    pairs, held = _load(data, check.eval_data, format_, split)
    planner = _planner(planner_file)
    if frozen_encoder == (base_model is not None):
        raise PrbenchError("give exactly one of --base-model (TRL fine-tuning) or --frozen-encoder")
    if frozen_encoder:
        view = {k: getattr(settings, k) for k in MethodView.model_fields}
        options = {**view, "epochs": int(epochs) if epochs else None, "lr": lr, "batch_size": batch_size,
                   "encoder": encoder}
        if planner is not None:  # the planner condition needs its file: plain training, no protocol
            from prbench.train.bt import train_context_bt
            from prbench.train.methods import make_config

            cfg = make_config("context-bt", options)
            _report(train_context_bt(pairs, out, cfg, eval_pairs=held, planner=planner), json_out,
                    eval_data=check.eval_data)
            return
        _run("context-bt", data, out, options, check, json_out, format_=format_, split=split)
        return
    from prbench.train.bt import train_bt

    cfg = BTConfig.build(settings, **set_options(epochs=epochs, lr=lr, batch_size=batch_size))  # None: BTConfig's
    result = train_bt(pairs, out, str(base_model), cfg, eval_pairs=held, planner=planner)  # set: checked above
    from prbench.train import is_main_process

    if is_main_process():  # rank 0 alone reports a launched run
        _report(result, json_out, eval_data=check.eval_data)


@app.command()
@settings_command(settings=PALConfig, check=Check)
def pal(data: Data, out: Out, settings: PALConfig, check: Check, format_: Format = None, split: TrainSplit = "train",
        adapt_data: AdaptData = None, json_out: Json = False) -> None:
    """Train PAL on (user, prompt, chosen, rejected) pairs. Evaluate the folder as pal:OUT."""
    from prbench.data.pairs import load_training_pairs

    extra = {"adapt_pairs": load_training_pairs(adapt_data, split)} if adapt_data else {}
    _run("pal", data, out, settings.model_dump(), check, json_out, format_=format_, split=split, **extra)


def _method_command(method: str, model: type, doc: str) -> Any:
    def command(data: Data, out: Out, settings: Any, check: Check, format_: Format = None,
                split: TrainSplit = "train", json_out: Json = False) -> None:
        _run(method, data, out, settings.model_dump(), check, json_out, format_=format_, split=split)

    command.__name__, command.__doc__ = method.replace("-", "_"), doc
    return app.command(method)(settings_command(settings=model, check=Check)(command))


def _simple_methods() -> tuple[tuple[str, type, str], ...]:
    """Methods whose command is their settings model and nothing else (`Method.command`), from the one registry
    (built-ins and `prbench.methods` plug-ins): `prbench train NAME`, evaluated as SPEC:OUT. A plug-in that fails
    to load is named on stderr and left out; the other commands still work."""
    import warnings

    from prbench.train.methods import METHODS

    out = []
    for name in METHODS.names():
        try:
            method = METHODS[name]
            if method.command:
                out.append((name, method.settings(), method.doc or f"Train {name}; {method.spec}:OUT."))
        except (SpecError, PrbenchError, ImportError, AttributeError) as exc:
            warnings.warn(f"prbench train {name}: not available ({exc})", stacklevel=2)
    return tuple(out)


SIMPLE_METHODS = _simple_methods()
COMMANDS = {name: _method_command(name, model, doc) for name, model, doc in SIMPLE_METHODS}


def synth_users(
    out: Annotated[Path, typer.Argument(help="Output .jsonl, .jsonl.gz, .json or .parquet.")],
    users: Annotated[int, typer.Option(help="Number of users.")] = 48,
    items_per_user: Annotated[int, typer.Option(help="Preference pairs per user.")] = 14,
    dimensions: Annotated[str | None, typer.Option(
        help="Comma-separated preference dimensions (default all): diet,budget,setting,era,mood,social,scope.")] = None,
    posts_per_dim: Annotated[int, typer.Option(help="Profile posts revealing each preference.")] = 2,
    neutral_posts: Annotated[int, typer.Option(help="Profile posts that reveal nothing.")] = 2,
    seed: Seed = 0,
    style: Annotated[str, typer.Option(
        help="preferences: planted content preferences; personas: writing-persona users (how they write).")] = "preferences",
    noise: Annotated[float, typer.Option(help="personas: share of phrases written in another persona.")] = 0.35,
    history: Annotated[int, typer.Option(
        help="personas: each pair carries up to this many of the user's earlier pairs (history conditions).")] = 0,
) -> None:
    """Write synthetic users with known truth. Planted preferences, or writing personas (--style personas)."""
    from prbench.data import write_examples
    from prbench.data.synth_users import synth_examples

    if style == "personas":
        from prbench.data.synth_personas import synth_persona_examples

        items = synth_persona_examples(users, items_per_user, seed=seed, noise=noise, history=history)
    elif history:
        raise PrbenchError("--history is for --style personas (planted-preference users have no earlier pairs)")
    elif style == "preferences":
        items = synth_examples(users, items_per_user, seed=seed, dimensions=split_csv(dimensions),
                               posts_per_dim=posts_per_dim, neutral_posts=neutral_posts)
    else:
        raise PrbenchError(f"--style must be preferences or personas, got {style!r}")
    n = write_examples(items, out)
    typer.echo(f"wrote {n} items for {users} users to {out}")
