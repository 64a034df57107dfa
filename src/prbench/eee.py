"""Results in the Every Eval Ever schema (v0.3.0): `prbench export eee RUNS --out DIR`.

Why: a shared result schema (converters exist for lm-eval, Inspect and HELM) lets anyone pool
prbench's numbers with other harnesses' without reading prbench's run folders. Each run kind
says what it reports (`RunKind.eee_parts`: one aggregate result per headline number, with its
per-item values); this module wraps them in the schema's aggregate file and instance-level file (one line per
item and aggregate result), laid out as the schema's repository expects:
`data/<benchmark>/<developer>/<model>/<uuid>.json` and `<uuid>_samples.jsonl`.

The models below are this project's typed copy of the fields it writes (so a fresh clone
checks every file it writes without the upstream schema files); tests also validate against
the upstream JSON Schema (evaleval/every_eval_ever, `schemas/eval.schema.json` and
`schemas/instance_level_eval.schema.json` at v0.3.0) where it is available.

Choices, after upstream's CONTRIBUTING.md ("Filling in the schema"): `model_info.id` is the
model in Hugging Face `developer/model` form, or `<provider>/<exact API id>` for an API model
(`identity`: a baseline is `prbench/baseline-<name>`, a local trained folder `local/<folder>`),
and prbench's own spec stays in `additional_details.prbench_spec`; `inference_platform` names
the API that served it, `inference_engine` what ran it locally; the evaluation id is
`{benchmark}/{model id}/{retrieved_timestamp}`, the timestamp being the run's result file time
(so re-exporting the same runs gives the same bytes); every kind names its data set (Best-of-N
from its samples' config when the file predates `data`), and no absolute local path is written.
`source_type` "evaluation_run", `evaluator_relationship` "third_party", eval library "prbench"
at its version. Inputs are referenced by item id (run folders keep ids and outcomes, not texts);
invalid items (no credit, no value) are left out and counted in the result details.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from prbench import __version__
from prbench.errors import PrbenchError
from prbench.evaluation import validity
from prbench.registry import ENGINES
from prbench.runkinds import Run, scan_runs
from prbench.runkinds.base import EEEPart
from prbench.store.records import EvalSummary

log = logging.getLogger(__name__)
SCHEMA_VERSION: Literal["0.3.0"] = "0.3.0"
Details = dict[str, str]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SourceMetadata(_Model):
    source_name: str
    source_type: Literal["documentation", "evaluation_run"]
    source_organization_name: str
    evaluator_relationship: Literal["first_party", "third_party", "collaborative", "other"]
    additional_details: Details = Field(default_factory=dict)


class EvalLibrary(_Model):
    name: str
    version: str


class ModelDetails(BaseModel):
    """`model_info.additional_details`: two required enums, any other value a string."""

    model_config = ConfigDict(extra="allow")
    deployment_type: Literal["self_deployed", "externally_managed", "unknown"]
    model_availability: Literal["open_weights", "closed_weights", "unknown"]

    def model_post_init(self, _ctx: object) -> None:
        bad = [k for k, v in (self.model_extra or {}).items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"model_info.additional_details.{bad[0]} must be a string")


class InferenceEngine(_Model):
    name: str
    version: str


class ModelInfo(_Model):
    name: str
    id: str
    developer: str
    inference_platform: str | None = None  # a remote API (CONTRIBUTING.md 3)
    inference_engine: InferenceEngine | None = None  # run locally
    additional_details: ModelDetails


class SourceData(_Model):
    dataset_name: str
    source_type: Literal["other"]
    additional_details: Details = Field(default_factory=dict)


class ConfidenceInterval(_Model):
    lower: float
    upper: float
    confidence_level: float
    method: str


class Uncertainty(_Model):
    confidence_interval: ConfidenceInterval | None = None
    num_samples: int


class ScoreDetails(_Model):
    score: float
    details: Details = Field(default_factory=dict)
    uncertainty: Uncertainty


class MetricConfig(_Model):
    evaluation_description: str
    metric_id: str
    metric_name: str
    lower_is_better: bool
    score_type: Literal["binary", "continuous", "levels"]
    min_score: float | None
    max_score: float | None


class EvaluationResult(_Model):
    evaluation_result_id: str
    evaluation_name: str
    source_data: SourceData
    metric_config: MetricConfig
    score_details: ScoreDetails


SAMPLES_PATH = (r"^data/[^/]+/[^/]+/[^/]+/[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-4[0-9A-Fa-f]{3}-[89ABab][0-9A-Fa-f]{3}"
                r"-[0-9A-Fa-f]{12}_samples\.jsonl$")  # the schema's repository layout


class DetailedResults(_Model):
    format: Literal["jsonl"]
    file_path: str = Field(pattern=SAMPLES_PATH)
    hash_algorithm: Literal["sha256"]
    checksum: str
    total_rows: int


class EEEAggregate(_Model):
    """One evaluation (`eval.schema.json`): the fields prbench writes."""

    schema_version: Literal["0.3.0"]
    evaluation_id: str
    retrieved_timestamp: str
    source_metadata: SourceMetadata
    eval_library: EvalLibrary
    model_info: ModelInfo
    evaluation_results: list[EvaluationResult]
    detailed_evaluation_results: DetailedResults


class InstanceInput(_Model):
    raw: str
    reference: list[str]


class InstanceOutput(_Model):
    raw: list[str]  # single-turn records need one; prbench keeps outcomes, not texts: the outcome read


class Attribution(_Model):
    turn_idx: int = Field(ge=0)
    source: str
    extracted_value: str
    extraction_method: str
    is_terminal: bool


class InstanceEvaluation(_Model):
    score: float
    is_correct: bool


class EEEInstance(_Model):
    """One item's outcome (`instance_level_eval.schema.json`): the fields prbench writes."""

    schema_version: Literal["0.3.0"]
    evaluation_id: str
    model_id: str
    evaluation_name: str
    evaluation_result_id: str
    sample_id: str
    interaction_type: Literal["single_turn"]
    input: InstanceInput
    output: InstanceOutput
    answer_attribution: list[Attribution]
    evaluation: InstanceEvaluation
    metadata: Details


# -- conversion -----------------------------------------------------------------------------
API_PLATFORMS = ("openai", "anthropic")  # engines that are remote APIs: the model id is the provider's exact one
BUILTIN_IDS = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
               "minilm-l6": "sentence-transformers/all-MiniLM-L6-v2"}  # prbench.engines.builtin's offline copies


@dataclass(frozen=True)
class Identity:
    """Who a prbench spec names, as upstream's `model_info` asks (CONTRIBUTING.md, "Filling in the schema" 1, 3)."""

    id: str  # `developer/model`: the Hugging Face repo, or `<provider>/<exact API id>`
    platform: str | None  # the remote API that served it
    engine: str | None  # what ran it locally
    deployment: Literal["self_deployed", "externally_managed", "unknown"]
    availability: Literal["open_weights", "closed_weights", "unknown"]

    @property
    def developer(self) -> str:
        return self.id.split("/", 1)[0]


def identity(spec: str) -> Identity:
    """The model a spec runs, found through its wrappers (`judge:openai:gpt-4o` -> openai, gpt-4o).

    A local folder (a trained RM) has no public name: `local/<folder name>` (never its path); a
    baseline is prbench's own code: `prbench/baseline-<name>`.
    """
    prefix, _, rest = spec.partition(":")
    while ":" in rest and rest.split(":", 1)[0] in ENGINES and prefix not in ENGINES:
        prefix, _, rest = rest.partition(":")  # a wrapper (judge, lik, pref, ...) around an engine spec
    if prefix in API_PLATFORMS:
        return Identity(f"{prefix}/{rest}", prefix, None, "externally_managed", "closed_weights")
    if prefix == "builtin" or rest.startswith("builtin:"):
        name = rest.removeprefix("builtin:")
        engine = "sentence-transformers" if "minilm" in name else "transformers"
        return Identity(BUILTIN_IDS.get(name, f"local/{name}"), None, engine, "self_deployed", "open_weights")
    if prefix == "baseline":
        return Identity(f"prbench/baseline-{_safe(rest)}", None, "prbench", "self_deployed", "unknown")
    if prefix == "py":  # the user's own Python RM, run by prbench
        return Identity(f"local/{_safe(Path(rest.split(':')[0]).stem)}", None, "prbench", "self_deployed", "unknown")
    engine = "vllm" if prefix == "vllm" else "transformers"
    local = rest.startswith(("/", ".", "~")) or rest.count("/") != 1 or Path(rest).expanduser().exists()
    if local:
        return Identity(f"local/{_safe(Path(rest).name or rest)}", None, engine, "self_deployed", "unknown")
    return Identity(rest, None, engine, "self_deployed", "open_weights")


def _engine_version(name: str) -> str:
    from importlib import metadata

    if name == "prbench":
        return __version__
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def _model_info(run: Run, model: str, ident: Identity) -> ModelInfo:
    extra = {"prbench_spec": _portable(model), "prbench_run_kind": run.kind.name}
    for name, value in (("policy", run.names.policy), ("condition", run.names.condition)):
        if value is not None:
            extra[f"prbench_{name}"] = _portable(str(value))
    return ModelInfo(name=_portable(model), id=ident.id, developer=ident.developer,
                     inference_platform=ident.platform,
                     inference_engine=InferenceEngine(name=ident.engine, version=_engine_version(ident.engine))
                     if ident.engine else None,
                     additional_details=ModelDetails(deployment_type=ident.deployment,
                                                     model_availability=ident.availability, **extra))


def _portable(text: str) -> str:
    """A spec or name with every absolute local path cut to its last part (an export leaves no machine's paths)."""
    return re.sub(r"(?<![\w.])(?:~|/)[^\s:]*/([^/\s:]+)", r"\1", text)


def _result(part: EEEPart, data: str) -> EvaluationResult:
    lo, hi = part.ci if part.ci else (None, None)
    ci = (ConfidenceInterval(lower=lo, upper=hi, confidence_level=0.95, method="percentile bootstrap over items")
          if lo is not None and hi is not None else None)
    return EvaluationResult(
        evaluation_result_id=part.result_id, evaluation_name=_portable(part.name),
        source_data=SourceData(dataset_name=data, source_type="other",
                               additional_details={k: _portable(v) for k, v in part.source_details.items()}),
        metric_config=MetricConfig(evaluation_description=part.description, metric_id=part.metric_id,
                                   metric_name=part.metric_name, lower_is_better=False, score_type="continuous",
                                   min_score=part.bounds[0], max_score=part.bounds[1]),
        score_details=ScoreDetails(score=part.score, details={k: _portable(v) for k, v in part.details.items()},
                                   uncertainty=Uncertainty(confidence_interval=ci, num_samples=part.n)))


def _instances(eval_id: str, model: str, part: EEEPart) -> list[EEEInstance]:
    return [EEEInstance(
        schema_version=SCHEMA_VERSION, evaluation_id=eval_id, model_id=model, evaluation_name=_portable(part.name),
        evaluation_result_id=part.result_id, sample_id=item.id, interaction_type="single_turn",
        input=InstanceInput(raw=item.id, reference=[item.reference]), output=InstanceOutput(raw=[item.extracted]),
        answer_attribution=[Attribution(turn_idx=0, source=part.source, extracted_value=item.extracted,
                                        extraction_method=part.extraction_method, is_terminal=True)],
        evaluation=InstanceEvaluation(score=item.score, is_correct=item.correct),
        metadata={k: _portable(v) for k, v in item.metadata.items()}) for item in part.items]


def _timestamp(run: Run) -> str:
    """When the run's result was written, in Unix epoch seconds (the same run gives the same string)."""
    files = [run.path / n for n in ("summary.json", "downstream.json", "report.json") if (run.path / n).is_file()]
    return repr(max(f.stat().st_mtime for f in files))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:80] or "_"


def dataset(run: Run) -> str | None:
    """The run's data set name (a file path cut to its name); None when the run never recorded one."""
    from prbench.runkinds.downstream import DownstreamKind

    name = run.kind.dataset(run) if isinstance(run.kind, DownstreamKind) else run.names.data
    if not name:
        cfg = run.config  # what was asked (config.json): the data a generation run read
        name = cfg["data"] if isinstance(cfg.get("data"), str) else None  # config.json: not a summary
    return Path(str(name)).name or str(name) if name else None


def layout(data: str, ident: Identity, eval_id: str) -> tuple[str, str]:
    """(`data/<benchmark>/<developer>/<model>`, uuid) of a run: the schema's repository layout.

    The uuid (version 4 form) is derived from the evaluation id, so the same run always lands in the same files.
    """
    developer, _, name = ident.id.partition("/")
    uid = uuid.UUID(bytes=hashlib.sha256(eval_id.encode()).digest()[:16], version=4)
    return f"data/{_safe(data)}/{_safe(developer)}/{_safe(name or developer)}", str(uid)


def _checked(run: Run, parts: list[EEEPart]) -> list[EEEPart]:
    """An eval run's parts named for what the number is: a trained RM scored on people it was trained on says so in
    the result's name and details, with the seen and unseen people's accuracies as results of their own (no
    instances: the run folder keeps who each item's person is, not which people the RM saw), and every failed check
    (`prbench.evaluation.validity.faults`) is in the details, so a reader of the export never ranks it unawares."""
    if not isinstance(run.typed, EvalSummary) or not parts:
        return parts
    s = run.typed
    why = validity.faults(s, run.items)
    who = validity.people(s)
    main = parts[0]
    details = dict(main.details)
    if why:
        details["not_a_ranking"] = "; ".join(why)
    extra: list[EEEPart] = []
    pu = s.per_user
    if who is not None and pu is not None and pu.seen is not None and pu.unseen is not None:
        details.update(seen_people=str(who.seen), unseen_people=str(who.unseen),
                       seen_people_share=f"{who.share:.4f}")
        for tag, part, acc in (("seen", pu.seen, who.seen_accuracy), ("unseen", pu.unseen, who.unseen_accuracy)):
            if acc is None:
                continue
            extra.append(replace(main, result_id=f"{main.result_id}:{tag}-people",
                                 name=f"{s.data} [{s.condition}, {tag} people]", score=acc, ci=None, n=part.n, items=[],
                                 description=f"{main.description}; only the pairs of the {part.n_users} people the "
                                             f"RM was {'' if tag == 'seen' else 'not '}trained on",
                                 details={"people": str(part.n_users), "condition": s.condition}))
    name = f"{s.data} [{s.condition}, seen people {100 * who.share:.0f}%]" if who is not None and who.seen \
        else main.name
    return [replace(main, name=name, details=details), *parts[1:], *extra]


def export_run(run: Run, root: Path, out: Path) -> list[Path]:
    """Write one run's aggregate and instance files; [] for a kind that reports no evaluation result."""
    parts = _checked(run, run.kind.eee_parts(run))
    if not parts:
        return []
    data = dataset(run)
    if data is None:
        raise PrbenchError(f"{run.path}: the run names no data set (nor does the config.json or samples folder it "
                           "came from); rerun it with this prbench to export it")
    model = run.key
    ident = identity(model)
    stamp = _timestamp(run)
    # upstream: `{benchmark}/{model_id}/{retrieved_timestamp}` (CONTRIBUTING.md 2), "/" in the id as "_" the way
    # its own RewardBench adapter writes it (adapters/rewardbench/adapter.py)
    eval_id = f"{_safe(data)}/{ident.id.replace('/', '_')}/{stamp}"
    rel = run.path.resolve().relative_to(root.resolve()) if run.path.resolve().is_relative_to(root.resolve()) \
        else Path(run.path.name)
    folder, uid = layout(data, ident, f"{eval_id}|{run.kind.name}|{rel.as_posix()}")
    lines = [json.dumps(i.model_dump(), sort_keys=True, ensure_ascii=False)
             for p in parts for i in _instances(eval_id, ident.id, p)]
    body = ("\n".join(lines) + "\n").encode() if lines else b""
    agg = EEEAggregate(
        schema_version=SCHEMA_VERSION, evaluation_id=eval_id, retrieved_timestamp=stamp,
        source_metadata=SourceMetadata(source_name="prbench", source_type="evaluation_run",
                                       source_organization_name="prbench", evaluator_relationship="third_party",
                                       additional_details={"prbench_run_kind": run.kind.name,
                                                           "prbench_run": rel.as_posix()}),
        eval_library=EvalLibrary(name="prbench", version=__version__), model_info=_model_info(run, model, ident),
        evaluation_results=[_result(p, data) for p in parts],
        detailed_evaluation_results=DetailedResults(format="jsonl", file_path=f"{folder}/{uid}_samples.jsonl",
                                                    hash_algorithm="sha256",
                                                    checksum=hashlib.sha256(body).hexdigest(),
                                                    total_rows=len(lines)))
    (out / folder).mkdir(parents=True, exist_ok=True)
    inst, agg_path = out / folder / f"{uid}_samples.jsonl", out / folder / f"{uid}.json"
    inst.write_bytes(body)
    agg_path.write_text(json.dumps(agg.model_dump(exclude_none=True), indent=2, sort_keys=True, ensure_ascii=False)
                        + "\n", encoding="utf-8")
    return [agg_path, inst]


def export_eee(runs: Sequence[str | Path], out: str | Path) -> dict[str, list[str]]:
    """Every run below `runs` in the EEE schema under `out`: {"written": files, "skipped": lines, "not_exported": folders}."""
    written: list[str] = []
    not_exported: list[str] = []
    scan = scan_runs(runs)
    roots = [Path(r) if Path(r).is_dir() else Path(r).parent for r in runs]
    skipped = list(scan.skipped)
    for run in scan.runs:
        root = next((r for r in roots if run.path.resolve().is_relative_to(r.resolve())), run.path.parent)
        try:
            files = export_run(run, root, Path(out))
        except PrbenchError as exc:  # a file only the export reads (scores.json) is damaged: this run alone
            skipped.append(f"skipped: {exc}")
            log.warning(skipped[-1])
            continue
        if files:
            written += [str(f) for f in files]
        else:
            not_exported.append(f"{run.path} ({run.kind.name}: no evaluation result)")
    if not written and not skipped:
        raise PrbenchError(f"{', '.join(map(str, runs))}: no run to export")
    return {"written": written, "skipped": skipped, "not_exported": not_exported, "notes": scan.notes}
