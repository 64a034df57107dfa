"""CLI options defined once and shared by every command."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:  # typer >= 0.26 runs its own copy of click: these are the classes its commands are handed
    from typer._click.core import Context
    from typer._click.formatting import HelpFormatter

from prbench.capabilities.eval.settings import EvalSettings
from prbench.config import ContextSpec, DataSpec, RunSpec, Settings, field_of, opt
from prbench.errors import SpecError
from prbench.registry import ENGINES, REWARDS
from prbench.specs import ModelSpec


class RMView(Settings):
    """What a served RM sees of each user and how it is run (`serve-reward`)."""

    top_k: int | None = field_of(EvalSettings, "top_k")  # None: the RM's own view, as eval (issue 51.17)
    retriever: str = field_of(ContextSpec, "retriever")
    planner_file: str | None = field_of(ContextSpec, "planner_file")
    max_context_chars: int | None = field_of(ContextSpec, "max_context_chars")
    batch_size: int = opt(16, "Examples per model batch.")
    max_length: int | None = opt(None, "Token budget per input (profile cut first, response never).")
    mode: str | None = opt(None, "Judges: must be pointwise.")


class ServeScale(Settings):
    """How `serve-reward` batches, admits and scales out (defaults: `prbench.serve.batcher.Batching`)."""

    max_batch_items: int = opt(64, "Most items of concurrent requests scored in one RM call.", ge=1)
    max_wait_ms: float = opt(2.0, "Longest a lone request waits for others to share its RM call.", ge=0)
    queue_items: int = opt(16_384, "Items admitted and not yet answered; past it requests get 503 + Retry-After.", ge=1)
    replicas: int = opt(1, "Model copies; more than 1 serves through Ray Serve (RAY_ADDRESS or a local Ray).", ge=1)
    gpus_per_replica: float | None = opt(None, "GPUs per replica (default: a 1/N share of the cluster's, at most 1).", ge=0)
    engine: str | None = opt(None, "hf: RMs: 'vllm' scores on vLLM's pooling runner (LLM.classify), for a large RM.")


# The aliases below that other commands use take their help from the settings: one text per option.
_HELP = {name: f.description for group in (DataSpec, RunSpec, RMView) for name, f in group.model_fields.items()}

Data = Annotated[str, typer.Option("--data", "-d", help="File, folder, hub dataset id, or 'sample'.")]
DataArg = Annotated[str, typer.Argument(help="File, folder, hub dataset id, 'sample' or 'sample:source'.")]
Split = Annotated[str, typer.Option(help=_HELP["split"])]
Format = Annotated[str | None, typer.Option("--format", "-F", metavar="NAME", help="Data format NAME[:OPTIONS] (prb, rewardbench2, prism:user ...; default: detected). See `prbench data formats`.")]
Categories = Annotated[str | None, typer.Option(help=_HELP["categories"])]
Limit = Annotated[int | None, typer.Option(help=_HELP["limit"])]
Seed = Annotated[int, typer.Option(help=_HELP["seed"])]


def folder_out(value: Path | None) -> Path | None:
    """--out must be able to become a folder: checked as the command line is read, before any work (a data file
    given as --out failed with FileExistsError only after training)."""
    if value is None:
        return value
    for p in (value, *value.parents):
        if p.is_dir():
            return value
        if os.path.lexists(p):
            raise SpecError(f"--out {value}: {p} is a file, not a folder, so the output folder cannot be made "
                            "there; choose another --out")
    return value


Out = Annotated[Path, typer.Option("--out", "-o", help="Output folder.", callback=folder_out)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or tables.")]
Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
Model = Annotated[str, typer.Option("--model", "-m", help="Model spec, e.g. hf:DIR, baseline:length, judge:openai:gpt-5.1.")]
Conditions = Annotated[
    str, typer.Option("--condition", "-c", help="Comma-separated: none,profile,planner,oracle,wrong-profile,history,persona,wrong-history,wrong-persona.")
]
BatchSize = Annotated[int, typer.Option(help=_HELP["batch_size"])]
MaxLength = Annotated[int | None, typer.Option(help=_HELP["max_length"])]
TopK = Annotated[int, typer.Option(help=_HELP["top_k"])]
Retriever = Annotated[str, typer.Option(help=_HELP["retriever"])]


def set_options(**given: object) -> dict[str, object]:
    """Only the options the user actually set (None and False mean unset), so backends keep their defaults."""
    return {k: v for k, v in given.items() if v is not None and v is not False}


def split_csv(value: str | None) -> list[str] | None:
    """'a, b' -> ['a', 'b']; None or '' -> None."""
    if not value:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


# -- shared by the downstream commands (sample, bon, rl, serve-reward) -------------------------
Device = Annotated[str | None, typer.Option(help="auto, cpu, cuda, cuda:1 ...")]
Dtype = Annotated[str | None, typer.Option(help="auto, float32, bfloat16, float16.")]
BaseUrl = Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint (else OPENAI_BASE_URL).")]
ApiKeyEnv = Annotated[str | None, typer.Option(help="Name of the env var that holds the API key.")]
NBoot = Annotated[int, typer.Option(help="Bootstrap resamples for confidence intervals.")]
RMCondition = Annotated[str, typer.Option("--condition", "-c", help="What the RM sees: none, profile, planner, oracle, wrong-profile.")]
PlannerFile = Annotated[str | None, typer.Option(help=_HELP["planner_file"])]
Overwrite = Annotated[bool, typer.Option(help="Discard an existing folder with another config.")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Do not read or write the score and retrieval caches.")]
Repair = Annotated[bool, typer.Option(help="Damaged examples.jsonl: keep the first record of each id, drop the rest.")]
Provider = Annotated[str | None, typer.Option(
    help="API profile: openai, anthropic, gemini, vllm, llamacpp or generic (default: from host and model name).")]
Rpm = Annotated[float | None, typer.Option("--rpm", help="Cap on API requests per minute.")]
Tpm = Annotated[float | None, typer.Option("--tpm", help="Cap on API tokens (prompt + max output) per minute.")]
NoApiKey = Annotated[bool, typer.Option("--no-api-key", help="The endpoint needs no key (keyless local server).")]
MaxUsd = Annotated[float | None, typer.Option(
    help="Stop before the next API request would take the run's spend past this many dollars (keeps what is "
         "finished, exits 3; re-run with a higher cap to resume).")]
Prices = Annotated[Path | None, typer.Option(
    help="Price table (JSON, layout of prbench/prices/openai.json) over the shipped one.")]


ModelOptions = Annotated[list[str] | None, typer.Option(
    "--model-option", "-M", metavar="KEY=VALUE",
    help="An option of the model's kind (repeatable), e.g. -M mode=pointwise, -M max_length=4096; values read as "
         "JSON when they parse (8, true, [1, 10]). Each model gets the keys its kind takes; a key no model takes "
         "is an error.")]


def engine_options(spec: str, **flags: object) -> dict[str, object]:
    """The command's engine flags the user set that the engine kind of `spec` declares (its options model).

    A grader spec that names no engine (`embedding:...`) gets none.
    """
    if spec.partition(":")[0] not in ENGINES:
        return {}
    return _for_kind(ENGINES, spec, set_options(**flags))


def _for_kind(registry: Any, spec: str, given: dict[str, object]) -> dict[str, object]:
    """The `given` options the kind of `spec` declares by name (a kind without an options model: none)."""
    from prbench.specs import options_model

    model = options_model(registry, spec)
    return {k: v for k, v in given.items() if model is not None and k in model.model_fields}


def model_options(specs: Sequence[str | ModelSpec], pairs: list[str] | None, **flags: object) -> dict[str, Any]:
    """Each model's options (by its spec's text): the command's flags its kind declares, then `-M KEY=VALUE`,
    checked by the kind (a spec parsed before, `prbench.preflight.model_specs`, is not parsed again).

    A `-M` key that none of the models' kinds takes is refused, naming the closest known option.
    """
    from prbench.rewards.base import checked_options
    from prbench.specs import declared, parse_spec, parse_value, unknown_option

    given: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--model-option {pair!r}: expected KEY=VALUE")
        given[key.strip().replace("-", "_")] = parse_value(value)
    parsed = [s if isinstance(s, ModelSpec) else parse_spec(REWARDS, s) for s in specs]
    names = {m.spec: declared(m.options_model) for m in parsed}
    known = set().union(*(n for n in names.values() if n is not None))
    if all(n is not None for n in names.values()):
        for key in given:
            if key not in known:
                raise SpecError(unknown_option(", ".join(m.spec for m in parsed), key, known))
    out = {}
    for m in parsed:
        mine = names[m.spec]
        own = {k: v for k, v in given.items() if mine is None or k in mine}
        kind = m.options_model
        flags_taken = {k: v for k, v in set_options(**flags).items() if kind is not None and k in kind.model_fields}
        out[m.spec] = checked_options(m, {**flags_taken, **own})  # the one check
    return out


def grader_engine_options(spec: str, access: Any, grader_access: Any) -> dict[str, object]:
    """The grader engine's options: the models' device and dtype, the grader's own endpoint and key."""
    return engine_options(spec, device=access.device, dtype=access.dtype, base_url=grader_access.grader_base_url,
                          api_key_env=grader_access.grader_api_key_env)


# -- shared by `prbench meta` and `prbench report` ---------------------------------------------
RunsRoots = Annotated[list[Path], typer.Option("--runs", "-r", help="Eval run root or run folder (repeatable).")]
DownstreamPaths = Annotated[
    list[Path], typer.Option("--downstream", "-D", help="downstream.json, a folder of them, or policy-accuracy runs (repeatable).")
]
NPerm = Annotated[int, typer.Option(help="Permutations for p-values.")]
MetaSummary = Annotated[str, typer.Option(help="Benchmark summary to correlate: mean, worst_category or mean_margin.")]
RboP = Annotated[float, typer.Option("--rbo-p", help="RBO persistence p (0 < p < 1).")]
NdcgK = Annotated[int | None, typer.Option("--ndcg-k", help="NDCG cut-off (default: all RMs).")]
ReportTitle = Annotated[str, typer.Option(help="Report title.")]
PublishedFile = Annotated[
    Path | None, typer.Option(help="JSON {model_spec: {condition: {category: accuracy %}}} of published numbers.")
]


# -- options built from settings models (prbench.config) ----------------------------------------
# `--help` groups an option under the settings class that declares it (the command's own: "<cmd> settings").
HELP_PANELS = {"DataSpec": "Data", "ContextSpec": "What the RM is shown", "RunSpec": "Run folder and seed",
               "EngineAccess": "Model loading and access", "GraderAccess": "Grader access",
               "PolicyPromptSpec": "Policy prompt", "GuidanceSpec": "Guidance", "DecodingSpec": "Decoding",
               "PolicyScoringSpec": "Policy scoring"}
def settings_command(
    *, exclude: tuple[str, ...] = (), **groups: type[Settings]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate `fn(<group>=..., **own)`: the command's options are `fn`'s own plus each model's fields.

    `groups` maps a parameter of `fn` to a settings model (`settings=RGDSettings`,
    `access=EngineAccess`); `fn` receives a validated instance of each. Each field becomes
    `--field-name` with its description as help, its default and its metavar; list fields are
    read as comma-separated text. So the CLI, the Python API and the study share one
    declaration (and one default) per option.
    """
    import functools
    import inspect
    import typing

    lists: set[str] = set()  # fields typed list[...]: comma-separated on the command line
    panels: dict[str, str] = {}  # field -> the --help group of the settings class that declares it

    def option_for(name: str, field: Any) -> inspect.Parameter:
        extra = field.json_schema_extra or {}
        ann = field.annotation
        is_list = name in lists
        cli_type = (str | None) if is_list else (str if typing.get_origin(ann) is typing.Literal else ann)
        flag = "--" + name.replace("_", "-")
        if ann in (bool, bool | None) and field.default is not False:  # on or unset by default: it needs an off form
            flag += "/--no-" + name.replace("_", "-")
        flags = [flag, *extra.get("cli", [])]
        option = typer.Option(*flags, help=field.description, metavar=extra.get("metavar"),
                              rich_help_panel=panels.get(name))
        default = ",".join(field.default) if is_list and field.default else field.default
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[cli_type, option])

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for n, p in inspect.signature(fn, eval_str=True).parameters.items() if n not in groups]
        taken = {p.name for p in own} | set(exclude)
        fields: dict[str, dict[str, Any]] = {}
        for group, model in groups.items():
            fields[group] = {n: f for n, f in model.model_fields.items() if n not in taken}
            taken |= set(fields[group])
        lists.update(n for fs in fields.values() for n, f in fs.items() if "list[" in str(f.annotation))
        for group, model in groups.items():
            for n in fields[group]:
                owner = next(c for c in model.__mro__ if n in getattr(c, "__annotations__", {}))
                panels[n] = HELP_PANELS.get(owner.__name__, f"{fn.__name__.removesuffix('_cmd')} settings")

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            built = {}
            for group, model in groups.items():
                values = {n: given.pop(n) for n in fields[group]}
                args: dict[str, Any] = {n: split_csv(v) if n in lists else v for n, v in values.items()}
                built[group] = model.build(**args)
            return fn(**built, **given)

        params = own + [option_for(n, f) for fs in fields.values() for n, f in fs.items()]
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # typer reads it; functions lack the attribute in typeshed
            [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params])
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command
    return wrap


class GroupedHelp(TyperCommand):
    """Plain (click) `--help` with the options in groups, by each option's `rich_help_panel`.

    The app keeps plain help (readable at 80 columns and in logs), where rich's panels would not
    print; a command of many options (`prbench eval`) uses this to stay scannable.
    """

    panel_of: ClassVar[dict[str, str]] = {}  # a command's own options: parameter name -> group

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            row = param.get_help_record(ctx)
            if row is not None:
                title = self.panel_of.get(param.name or "") or getattr(param, "rich_help_panel", None)
                groups.setdefault(title or "Other options", []).append(row)
        order = [*dict.fromkeys(self.panel_of.values()), *HELP_PANELS.values()]  # the command's groups first
        for title, rows in sorted(groups.items(), key=lambda g: order.index(g[0]) if g[0] in order else len(order)):
            with formatter.section(title):
                formatter.write_dl(rows)
