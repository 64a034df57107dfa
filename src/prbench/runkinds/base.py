"""What a run kind declares, the one reader of a finished run folder, and a meta-evaluation setting.

Why one reader: meta, the report, the leaderboard, `compare`, `export eee` and study freshness
all read finished runs. `open_run` reads every file through the checked readers (a damaged file
is one `DataError` naming file and line), finds the folder's kind, validates its summary against
the kind's model, and hands back a `Run`; `scan_runs` does so for every run folder below some
paths and turns each damaged one into the same one-line `skipped: FILE:LINE: ...` message.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from prbench.downstream.results import FILENAME as DOWNSTREAM_FILE
from prbench.downstream.results import DownstreamResult, read_downstream
from prbench.errors import DataError, NotARun, PrbenchError
from prbench.registry import RUNKINDS, resolve
from prbench.store.records import (
    EvalSummary,
    GenerationSummary,
    PolicyAccuracySummary,
    newer_format,
    run_kind,
    typed_summary,
)
from prbench.store.runs import read_json, read_records, regular_file

log = logging.getLogger("prbench.runkinds")
SUMMARY_FIX = ("delete it and rerun the eval (or the command that wrote it); the summary is recomputed from "
               "examples.jsonl")
RECORDS_FIX = ("rerun the command that wrote this run with --repair (it keeps the first record of each id and "
               "scores the dropped items again)")
MARKERS = ("summary.json", DOWNSTREAM_FILE, "report.json")  # files that make a folder a run folder
RECORDS = "examples.jsonl"  # a folder holding only records is a run that lost (or never wrote) its summary
T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Names:
    """What a run is of, as its kind reads it from typed fields: the RM by every name it is known by (the key
    first: a spec before a model name), the data set, the input condition and the policy (None: not said)."""

    rm: tuple[str, ...] = ()
    data: str | None = None
    condition: str | None = None
    policy: str | None = None


@dataclass
class Run:
    """One finished run folder as its kind reads it: the summary as the kind's model (`typed`), never a dict."""

    path: Path
    kind: RunKind
    summary: dict[str, Any] | None = None  # summary.json as written (only `records.typed_summary` reads it)
    downstream: DownstreamResult | None = None  # downstream.json
    report: dict[str, Any] | None = None  # a build's report.json
    typed: BaseModel | None = None  # the summary as the kind's model
    notes: list[str] = field(default_factory=list)  # read, with a remark (a newer format)
    items: list[Any] = field(default_factory=list)  # the records as the kind's record models, in file order

    @cached_property
    def _written_records(self) -> list[dict[str, Any]]:
        """examples.jsonl through the checked reader ([] when the kind writes none): what `check` validates into
        `items`, and what a kind recomputes its summary from with the writer's own functions; readers use `items`."""
        return read_records(self.path / RECORDS, RECORDS_FIX) if self.kind.records_file else []

    @cached_property
    def config(self) -> dict[str, Any]:
        """config.json (what was asked) through the checked reader; {} when the run wrote none."""
        path = self.path / "config.json"
        fix = "rerun the command that wrote this run (it rewrites config.json)"
        cfg = read_json(path, fix) if regular_file(path, fix) else {}
        if not isinstance(cfg, dict):
            raise DataError(str(path), None, None, "not a JSON object; rerun the command that wrote this run")
        return cfg

    @property
    def ds(self) -> DownstreamResult:
        """downstream.json of a downstream kind's run (any other run: an error naming the folder)."""
        if self.downstream is None:
            raise PrbenchError(f"{self.path / 'summary.json'}: says this is a {self.kind.name} run, but the folder "
                               "has no downstream.json; rerun the command that wrote it")
        return self.downstream

    def summary_as(self, model: type[T]) -> T:
        """The summary as `model` (what the kind validated when the run was opened)."""
        if not isinstance(self.typed, model):
            raise PrbenchError(f"{self.path / 'summary.json'}: a {self.kind.name} run's summary is not a "
                               f"{model.__name__}; rerun the command that wrote it")
        return self.typed

    @cached_property
    def names(self) -> Names:
        """The RM, data set, condition and policy of the run (`RunKind.names`)."""
        return self.kind.names(self)

    @property
    def key(self) -> str:
        """The RM this run belongs to: downstream `rm`, else the summary's `spec` (falling back to `model`, `rm`)."""
        if self.downstream is not None:
            return self.downstream.rm
        return next(iter(self.names.rm), "")

    @property
    def aliases(self) -> list[str]:
        """The names the RM is known by: spec first, then model name (none for a downstream.json run)."""
        return [] if self.downstream is not None else list(self.names.rm)

    @property
    def data(self) -> str:
        return str(self.names.data or "?")

    @property
    def condition(self) -> str:
        return str(self.names.condition)


@dataclass
class Setting:
    """One downstream setting for meta: per RM, per item outcome values (what the item bootstrap needs)."""

    label: str
    setting: str  # the kind's setting name: bon | rl | rgd | policy_accuracy | a plug-in's
    values: dict[str, dict[str, float]]  # rm -> item id -> value
    k: int | None = None
    max_k: bool = False
    condition: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # rm -> file
    rm_credit: dict[str, dict[str, float]] = field(default_factory=dict)  # the RM's own credits (policy accuracy)

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "setting": self.setting, "k": self.k, "max_k": self.max_k,
                "condition": self.condition, "params": self.params, "rms": sorted(self.values),
                "n_items": {rm: len(v) for rm, v in sorted(self.values.items())}, "sources": self.sources}


@dataclass(frozen=True)
class EEEItem:
    """One item's outcome for an Every Eval Ever instance record."""

    id: str
    score: float
    correct: bool
    extracted: str  # what the outcome was read as ("chosen", "0.75", ...)
    reference: str  # what counts as right ("chosen", "max grade", ...)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EEEPart:
    """One aggregate result of a run (a headline number with its per-item values), for `prbench.eee`."""

    result_id: str
    name: str
    metric_id: str
    metric_name: str
    description: str
    score: float
    ci: tuple[float | None, float | None] | None
    n: int
    bounds: tuple[float | None, float | None]
    source: str  # where the instance value comes from in the run folder
    extraction_method: str
    items: list[EEEItem]
    details: dict[str, str] = field(default_factory=dict)
    source_details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetaOptions:
    """What meta asks of downstream kinds (each kind reads the options it knows)."""

    bon_curve: str = "expected"
    bon_k: str = "all"
    pa_metric: str = "total"


class RunKind:
    """A kind of finished run. Subclass, set the class attributes, register an instance as `KIND`."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # for headings and notes
    role: ClassVar[str] = "other"  # "benchmark" (eval), "downstream" (a meta setting) or "other"
    setting: ClassVar[str | None] = None  # the downstream.json `setting` it reads (a plug-in's: its name)
    records_file: ClassVar[bool] = False  # whether the run keeps per-example records in examples.jsonl
    summary_model: ClassVar[type[BaseModel] | None] = None
    record_model: ClassVar[Any] = None  # a pydantic model (or a callable choosing one) for one record
    group_fields: ClassVar[tuple[str, ...]] = ()  # what makes a setting: runs equal on these are compared
    label_fields: ClassVar[tuple[tuple[str, str], ...]] = ()  # (shown as, field) in the meta label
    short: ClassVar[str] = ""  # the setting's name in labels ("BoN", "RL", ...)
    value_definition: ClassVar[str] = ""  # meta's `definitions[<setting>_value]`
    # The function rendering the kind's part of the report, or its "module:function". With `report_id` (a section
    # id of the page, `prbench.report.html.SECTIONS`) it renders that whole section, called (report data, seed,
    # n_boot): eval's leaderboard, build, bon. Without, it is a block of the "rl-rgd" section, called (report
    # data, kind). A function given in the class body is wrapped in `staticmethod` (else it binds to the kind).
    report_section: ClassVar[Any] = None
    report_id: ClassVar[str | None] = None
    # What makes a run of this kind, so one registration (RUNKINDS) is the whole extension:
    # `settings_model` (its pydantic settings: the study section and the command's options), `driver`
    # (the function writing one run, or its "module:function"), `stage` (a `prbench.study.context.Stage` or its
    # "module:attr": `prbench.registry.STAGES` lists it under the Stage's name) and `command` (`prbench <name>`, for
    # built-in and plug-in kinds alike: a typer command function, a typer `CommandInfo` (a function with its click
    # settings) or a typer app (a group of commands), or its "module:attr"; a plug-in kind named like another
    # command gets none). A built-in kind (`prbench.capabilities.<name>.kind`) names each part directly.
    settings_model: ClassVar[Any] = None
    driver: ClassVar[Any] = None
    stage: ClassVar[Any] = None
    command: ClassVar[Any] = None

    def report_block(self) -> Callable[..., str] | None:
        """`report_section` as a function (a built-in names it directly, a plug-in may give its "module:function")."""
        return resolve(self.report_section)
    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A group or label field must be a field of the model it is read from (`fields_model`): a misspelt one is
        refused when the kind is defined, never read as None."""
        super().__init_subclass__(**kwargs)
        declared = [*cls.group_fields, *(f for _, f in cls.label_fields)]
        model = cls.fields_model()
        missing = [f for f in dict.fromkeys(declared) if model is None or f not in model.model_fields]
        if missing:
            where = model.__name__ if model is not None else "no model (set summary_model)"
            raise TypeError(f"run kind {cls.__name__}: group_fields/label_fields name {', '.join(map(repr, missing))}, "
                            f"no field of {where}; declare the field on the model")

    @classmethod
    def fields_model(cls) -> type[BaseModel] | None:
        """The model `group_fields` and `label_fields` are attributes of: the kind's summary model."""
        return cls.summary_model

    def fields(self, run: Run) -> BaseModel:
        """The run as `fields_model` (what `group_fields` and `label_fields` are read from)."""
        model = self.fields_model()
        if model is None:
            raise PrbenchError(f"run kind {self.name!r} has no summary model to read its fields from")
        return run.summary_as(model)

    def values(self, run: Run, names: Sequence[str]) -> dict[str, Any]:
        """The run's values of declared fields (`group_fields`, `label_fields`), by typed attribute."""
        if not names:
            return {}
        typed = self.fields(run)
        return {f: getattr(typed, f) for f in names}  # declared fields only: checked when the kind was defined

    def names(self, run: Run) -> Names:
        """The run's RM, data set and condition from its typed summary (the summary models that name them)."""
        s = run.typed
        if isinstance(s, EvalSummary):
            return Names(tuple(dict.fromkeys(v for v in (s.spec, s.model) if v)), s.data, s.condition)
        if isinstance(s, (PolicyAccuracySummary, GenerationSummary)):
            return Names((s.rm,) if s.rm else (), s.data, s.condition, s.policy)
        return Names()

    def check(self, run: Run) -> None:
        """Validate what the readers rely on: the summary against the kind's model, each record against its model."""
        if self.summary_model is not None and run.summary is not None:
            run.typed = typed_summary(run.summary, run.path / "summary.json", self.summary_model)
        if self.records_file and self.record_model is not None:
            path = run.path / RECORDS
            run.items = [_validate_record(self.record_model, rec, path, n)
                         for n, rec in enumerate(run._written_records, 1)]

    def group_key(self, run: Run) -> tuple:
        """The one definition of a setting: runs with equal keys are one setting (one meta row, one report table)."""
        return tuple(repr(v) for v in self.values(run, self.group_fields).values())

    def meta_settings(self, runs: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
        """The meta-evaluation settings these runs make (none for kinds that are no downstream setting)."""
        return []

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """The run's results for `prbench export eee` (none: this kind reports no evaluation result)."""
        return []

    def label(self, run: Run) -> str:
        """The setting's label in meta tables: short name, labelled parameters, [condition]."""
        values = self.values(run, [name for _, name in self.label_fields])
        parts = {shown: values[name] for shown, name in self.label_fields}
        extras = [f"{n}={v:g}" if isinstance(v, float) else f"{n}={v}" for n, v in parts.items()
                  if v is not None and not (n == "metric" and v == "grade")]
        out = self.short or self.name
        if extras:
            out += " " + " ".join(extras)
        cond = run.names.condition
        return out + (f" [{cond}]" if cond else "")


def mismatch(stored: Any, fresh: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """(field, stored, recomputed) of the first figure `stored` gives otherwise than `fresh` (None: all agree).

    Only what `fresh` holds is compared (an older summary may lack a figure; it then publishes none). Numbers
    agree within 1e-9: recomputed by the same function from the same records, they are equal bit for bit.
    """
    if isinstance(fresh, dict):
        if not isinstance(stored, dict):
            return where, stored, "an object"
        for key, value in fresh.items():
            if key in stored and (found := mismatch(stored[key], value, f"{where}.{key}" if where else str(key))):
                return found
        return None
    if isinstance(fresh, (list, tuple)):
        if not isinstance(stored, (list, tuple)) or len(stored) != len(fresh):
            return where, stored, list(fresh)
        return next((f for i, (a, b) in enumerate(zip(stored, fresh)) if (f := mismatch(a, b, f"{where}[{i}]"))),
                    None)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (stored, fresh))
    if numbers and isinstance(fresh, float) or numbers and isinstance(stored, float):
        same = math.isfinite(stored) and abs(stored - fresh) <= 1e-9 * max(1.0, abs(fresh))
    else:
        same = stored == fresh and type(stored) is type(fresh) or numbers and stored == fresh
    return None if same else (where, stored, fresh)


def _validate_record(model: Any, rec: dict[str, Any], path: Path, n: int) -> Any:
    """One record as the kind's record model (a pydantic model, or a callable choosing one); n: its line."""
    from pydantic import ValidationError

    if isinstance(model, type) and issubclass(model, BaseModel):
        try:
            return model.model_validate(rec)
        except ValidationError as e:
            err = e.errors()[0]
            raise DataError(str(path), n, ".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, ")
                            ) from None
    return model(rec, path, n)


# -- the registry ---------------------------------------------------------------------------
def kind(name: str) -> RunKind:
    """The registered kind `name` (built in or a plug-in)."""
    found = RUNKINDS.get(name)
    if not isinstance(found, RunKind):
        raise PrbenchError(f"run kind {name!r}: its registry entry gives a {type(found).__name__}, not a RunKind")
    return found


def kinds() -> list[RunKind]:
    """Every registered kind, by name."""
    return [kind(n) for n in RUNKINDS.names()]


def _kind_of(summary: Any, ds: DownstreamResult | None, report: Any) -> RunKind | None:
    name = run_kind(summary) if summary is not None else None
    if name is not None:
        return kind(name)
    if ds is not None:
        return next((k for k in kinds() if k.setting == ds.setting), None)
    if report is not None:
        return next((k for k in kinds() if (reads := getattr(k, "reads_report", None)) and reads(report)), None)
    return None


# -- reading --------------------------------------------------------------------------------
def _no_kind(path: Path, summary: Any) -> DataError:
    """Why a summary.json names no kind prbench reads."""
    if not isinstance(summary, dict):
        return DataError(str(path), None, None, f"not a JSON object but {type(summary).__name__}; " + SUMMARY_FIX)
    if "run" in summary:
        return DataError(str(path), None, "run", f"unknown run kind {summary['run']!r} (a plug-in that is not "
                                                 "installed, or a damaged file); " + SUMMARY_FIX)
    return DataError(str(path), None, None, "not the summary of a run kind prbench knows; " + SUMMARY_FIX)


def _downstream(path: Path) -> DownstreamResult:
    """downstream.json through its validator; every problem names the file (the validator's own words after it)."""
    try:
        return read_downstream(path)
    except DataError:
        raise
    except PrbenchError as exc:
        why = str(exc).removeprefix(f"{path}: ").removeprefix("downstream result: ")
        raise DataError(str(path), None, None, f"{why}; rerun the command that wrote it") from None


def run_credits(run: Run) -> dict[str, float]:
    """Item id -> credit of every validly scored pair of a benchmark run (its typed records): what `compare`,
    the report's paired tests and the viewer pair two runs on."""
    return {rec.id: rec.credit for rec in run.items if rec.credit is not None}


def open_run(path: str | Path) -> Run:
    """The run in folder `path` (or the folder of a file in it); a damaged file is a DataError naming file and line."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise PrbenchError(f"{folder}: no such run folder")
    s_path, d_path, r_path = (folder / m for m in MARKERS)
    summary = read_json(s_path, SUMMARY_FIX) if regular_file(s_path, SUMMARY_FIX) else None
    ds = _downstream(d_path) if regular_file(d_path, "rerun the command that wrote it") else None
    report = read_json(r_path) if regular_file(r_path) else None
    k = _kind_of(summary, ds, report)
    if k is None:
        if summary is not None:
            raise _no_kind(s_path, summary)
        if ds is None and report is None and (folder / RECORDS).exists():
            raise DataError(str(s_path), None, None, f"missing, though {RECORDS} holds records (an unfinished run, "
                                                     "or its summary was deleted); rerun the command that wrote "
                                                     "this run to finish it")
        raise NotARun(f"{folder}: not a run folder prbench can read (no summary, downstream.json or build report "
                      "of a known kind)")
    run = Run(folder, k, summary if isinstance(summary, dict) else None, ds,
              report if isinstance(report, dict) else None)
    k.check(run)
    if k.records_file:
        run._written_records  # noqa: B018 - read now, so a torn line is found where the run is opened
    if run.summary is not None and (note := newer_format(run.summary, s_path)):
        run.notes.append(note)
    return run


def run_folders(paths: Sequence[str | Path]) -> list[Path]:
    """Run folders at or below each path (a file stands for its folder), in order, once each."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            out.append(p.parent)
        elif p.is_dir():
            out.extend(sorted({f.parent for m in (*MARKERS, RECORDS) for f in p.rglob(m)}))
        else:
            raise PrbenchError(f"{p}: no such file or folder")
    return list(dict.fromkeys(out))


@dataclass
class Scan:
    """The runs found below some paths, one line per damaged run folder that was skipped, and notes."""

    runs: list[Run]
    skipped: list[str]
    notes: list[str] = field(default_factory=list)

    def of(self, *roles_or_names: str) -> list[Run]:
        return [r for r in self.runs if r.kind.role in roles_or_names or r.kind.name in roles_or_names]


def scan_runs(paths: Sequence[str | Path], warn: Callable[[str], None] | None = None) -> Scan:
    """Every readable run below `paths`; a damaged one is skipped with one line (`skipped: FILE:LINE: ...`).

    The same line is logged (a warning on stderr) by meta, the report, the leaderboard and the export alike;
    whatever is wrong with one folder never stops the others.
    """
    runs, skipped, notes = [], [], []
    say = warn or log.warning
    for folder in run_folders(paths):
        try:
            run = open_run(folder)
        except NotARun:
            continue
        except PrbenchError as exc:
            skipped.append(f"skipped: {exc}")
        except (OSError, RecursionError, ValueError) as exc:  # a reader that met what no check foresaw
            skipped.append(f"skipped: {folder}: {type(exc).__name__}: {str(exc)[:200]}")
        else:
            runs.append(run)
            notes.extend(run.notes)
            for note in run.notes:
                say(note)
            continue
        say(skipped[-1])
    return Scan(runs, skipped, notes)


def by_kind(runs: Sequence[Run]) -> Mapping[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.kind.name, []).append(r)
    return out
