"""`build_benchmark`: source items -> retrieved posts -> chosen/rejected -> validator scores -> filter -> export.

The build folder is a run folder (`build/`: config, per-item records appended and fsynced as
each batch of items completes, summary). A re-run with the same generation settings skips the
recorded items; model calls are cached by content hash, so even a half-finished batch costs
nothing the second time. The filter rule, `--limit` and `--categories` are not part of the run
identity: decisions are recomputed from the stored scores at the end, and a larger limit
extends an earlier build.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field, ValidationInfo, field_validator

from prbench import cost
from prbench.build.calls import CachedEngine
from prbench.build.export import dataset_card, export_dataset, push_to_hub
from prbench.build.filter import FilterRule, decide
from prbench.build.generate import ROLES, generate_pairs
from prbench.build.report import build_report, report_markdown
from prbench.build.settings import BuildSettings
from prbench.build.validate import validate_answers
from prbench.context.conditions import build_view
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.engines.base import Engine, GenParams, load_engine
from prbench.engines.batch import optional, reading_only
from prbench.prompts import load_prompt
from prbench.schema import Example, SourceItem
from prbench.store.cache import Cache, NullCache
from prbench.store.records import BuildSummary, typed_summary
from prbench.store.runs import RunDir, refuse_secrets, write_json_atomic

PROMPTS = ("build_chosen", "build_rejected", "build_validate")


class BuildConfig(BuildSettings):
    """Everything a build is asked to do: the source, the two engines and `BuildSettings`.

    `identity()` is the part that decides its records.
    """

    source: str
    generator: str
    validator: str
    generator_options: dict[str, Any] = Field(default_factory=dict)
    validator_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("generator_options", "validator_options")
    @classmethod
    def _no_secrets(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        refuse_secrets(v, info.field_name or "options")  # they are written to the build folder
        return v

    @property
    def rule(self) -> FilterRule:
        return FilterRule(self.min_chosen_fit, self.max_rejected_fit, self.max_quality_gap, self.max_length_ratio)

    def identity(self) -> dict[str, Any]:
        """Settings that change generated text or scores; a resumed build must match them."""
        keys = ("source", "generator", "validator", "top_k", "retriever", "seed", "split", "max_words",
                "max_context_chars", "temperature", "top_p", "repetition_penalty", "max_new_tokens",
                "validator_max_new_tokens",
                "generator_options", "validator_options")
        ident = {k: getattr(self, k) for k in keys}
        ident["prompt_hashes"] = {p: load_prompt(p).hash for p in PROMPTS}
        ident["batch_size"] = self.batch_size  # volatile for RunDir: never decides a result
        return ident


@dataclass
class BuildResult:
    """What `build_benchmark` returns: the folder, its summary as its model, report.json, records, counts."""

    path: Path
    summary: BuildSummary
    report: dict[str, Any]
    records: list[dict[str, Any]]
    counts: dict[str, int]
    written: dict[str, Any] = field(default_factory=dict, repr=False)
    """summary.json's object as written (key order and number types kept): what `--json` prints."""


def _posts_text(view) -> str:
    posts = view.posts[: view.shown_posts]
    return "\n".join(f"- [{p.category}] {p.text}" if p.category else f"- {p.text}" for p in posts)


def _penalty(given: float | None, engine: Engine) -> float:
    """The configured repetition penalty, else the engine's default (small models loop without one)."""
    if given is not None:
        return given
    default = getattr(engine, "default_params", None)
    return float(getattr(default, "repetition_penalty", 1.0) or 1.0)


def _engine(spec: str, options: dict[str, Any], given: Engine | None) -> Engine:
    return given if given is not None else load_engine(spec, **options)


def build_benchmark(
    config: BuildConfig,
    out: str | Path,
    *,
    generator: Engine | None = None,
    validator: Engine | None = None,
    cache: Cache | None = None,
    overwrite: bool = False,
    push_to: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    max_usd: float | None = None,
    prices: str | Path | None = None,
    batch: bool = False,
    wait: bool = True,
) -> BuildResult:
    """Build (or resume building) a benchmark into `out`; engines may be passed in ready-made.
    API spend lands in the summary's `cost`; `max_usd` caps generator and validator together (`prbench.cost`);
    `batch` sends their requests as provider batches (`prbench.engines.batch`: generation, then validation)."""
    t0 = time.time()
    out = Path(out)
    items: list[SourceItem] = load_examples(config.source, kind="source", categories=config.categories,
                                            limit=config.limit, split=config.split)
    run = RunDir(out / "build", config.identity(), overwrite=overwrite)
    done = run.done_ids()
    todo = [it for it in items if it.id not in done]
    cache = cache if cache is not None else Cache(namespace="build")
    gen_counter = val_counter = None
    if todo:
        gen_engine = _engine(config.generator, config.generator_options, generator)
        same = config.validator == config.generator and config.validator_options == config.generator_options
        if validator is None and same:
            val_engine = gen_engine  # one model in memory when both roles use it
        else:
            val_engine = _engine(config.validator, config.validator_options, validator)
        gen = CachedEngine(gen_engine, cache)
        val = CachedEngine(val_engine, cache)

        def collect() -> None:  # a pass that keeps nothing: the requests it defers go out as batches
            with reading_only(gen), reading_only(val):
                _run_items(config, _Discard(), todo, gen, val, cache, lambda n: None)

        with cost.tracking([gen_engine, val_engine], run.path, max_usd=max_usd, prices=prices,
                           batch=batch) as spend, optional(batch, [gen, val], run.path, collect, wait=wait):
            def progress(n: int) -> None:
                cost.save(spend, run.path)  # after each saved chunk: a kill loses no spend
                if on_progress:
                    on_progress(len(done) + n, len(items))

            _run_items(config, run, todo, gen, val, cache, progress)
        gen_counter, val_counter = gen.counter, val.counter  # read after batch mode undid its collecting passes
    if on_progress:
        on_progress(len(items), len(items))
    return _finish(config, out, run, items, len(done), gen_counter, val_counter, t0, push_to)


class _RecordSink(Protocol):
    """Where `_run_items` puts finished records: a RunDir, or `_Discard`."""

    def append(self, records: Iterable[dict[str, Any]]) -> None: ...


class _Discard:
    """A run folder that keeps nothing (batch mode's collecting passes)."""

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        return None


def _run_items(config: BuildConfig, run: _RecordSink, todo: Sequence[SourceItem], gen: CachedEngine,
               val: CachedEngine, cache: Cache, progress: Callable[[int], Any]) -> None:
    retriever = load_retriever(config.retriever)
    rcache = Cache(cache.path, namespace="retrieval") if not isinstance(cache, NullCache) else None
    prompts = {role: load_prompt(f"build_{role}") for role in ROLES}
    vprompt = load_prompt("build_validate")
    gparams = GenParams(max_new_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p,
                        repetition_penalty=_penalty(config.repetition_penalty, gen.engine))
    vparams = GenParams(max_new_tokens=config.validator_max_new_tokens, temperature=0.0,
                        repetition_penalty=_penalty(config.repetition_penalty, val.engine))
    for start in range(0, len(todo), config.batch_size):
        part = list(todo[start : start + config.batch_size])
        views = [build_view(it, "profile", retriever=retriever, top_k=config.top_k,
                            max_context_chars=config.max_context_chars, cache=rcache) for it in part]
        answers = generate_pairs(gen, part, [_posts_text(v) for v in views], seed=config.seed,
                                 max_words=config.max_words, params=gparams, prompts=prompts)
        jobs = [(it, role, answers[i][role].text) for i, it in enumerate(part)
                if not any(a.error for a in answers[i].values()) for role in ROLES]
        scored = iter(validate_answers(val, jobs, seed=config.seed, params=vparams, prompt=vprompt))
        records = []
        for i, it in enumerate(part):
            rec: dict[str, Any] = {"id": it.id, "category": it.category,
                                   "posts": [p.id for p in views[i].posts[: views[i].shown_posts]]}
            for role in ROLES:
                rec[role] = answers[i][role].as_dict()
            if not any(a.error for a in answers[i].values()):
                rec["validation"] = {}
                for role in ROLES:
                    v = next(scored)
                    rec["validation"][role] = {"scores": v.scores, "attempts": v.attempts,
                                               "parse_failures": v.parse_failures, "error": v.error,
                                               "raw": v.raw[-1] if v.raw else ""}
            records.append(rec)
        run.append(records)
        progress(start + len(part))


def _finish(config: BuildConfig, out: Path, run: RunDir, items: Sequence[SourceItem], resumed: int,
            gen_counter, val_counter, t0: float, push_to: str | None) -> BuildResult:
    """Decide, export, report: always from the stored records, so a resumed build ends the same."""
    by_id = {it.id: it for it in items}
    records = [r for r in run.records() if r["id"] in by_id]
    order = {it.id: i for i, it in enumerate(items)}
    records.sort(key=lambda r: order[r["id"]])
    rule = config.rule
    decisions = {r["id"]: decide(r, rule) for r in records}
    kept = [Example.model_validate({**by_id[r["id"]].model_dump(), "chosen": r["chosen"]["text"],
                                    "rejected": r["rejected"]["text"]})
            for r in records if not decisions[r["id"]]]
    counts = export_dataset(kept, out)
    meta = {"generator": config.generator, "validator": config.validator, "source": config.source,
            "seed": config.seed, "max_words": config.max_words}
    report = build_report(records, decisions, rule, meta)
    md = report_markdown(report)
    write_json_atomic(out / "report.json", report)
    (out / "report.md").write_text(md, encoding="utf-8")
    with (out / "decisions.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps({"id": r["id"], "category": r["category"], "kept": not decisions[r["id"]],
                                 "reasons": decisions[r["id"]]}) + "\n")
    full = {**config.model_dump(), "prompt_hashes": run.config["prompt_hashes"]}
    write_json_atomic(out / "build_config.json", full)
    (out / "README.md").write_text(dataset_card(counts, full, report, md, config.license), encoding="utf-8")
    summary = {
        "processed": len(records), "kept": len(kept), "dropped": len(records) - len(kept),
        "per_category": counts, "resumed_from": resumed,
        "calls": {"generator": gen_counter.as_dict() if gen_counter else None,
                  "validator": val_counter.as_dict() if val_counter else None},
        "wall_time_s": round(time.time() - t0, 3), "config": full,
    }
    if (run.path / cost.LEDGER_FILE).is_file():
        summary["cost"] = json.loads((run.path / cost.LEDGER_FILE).read_text(encoding="utf-8"))
    if push_to:
        summary["pushed_to"] = push_to_hub(out, push_to)
    run.write_summary(summary)
    typed = typed_summary(summary, run.path / "summary.json", BuildSummary)
    return BuildResult(out, typed, report, records, counts, summary)
