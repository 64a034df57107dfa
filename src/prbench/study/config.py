"""The study config: a validated YAML schema whose errors point at the YAML line.

Every stage reuses the run folders and caches of the single commands, so a study resumes,
skips finished work, and a changed config recomputes only what changed.

Loading is bounded, so a hostile or mistyped file fails in a moment with one line: at most
1 MiB of UTF-8, no YAML aliases or anchors (`*name` could expand a small file into gigabytes),
counts and sizes are strict whole numbers within ranges, every stage finds the sections it
needs, and model specs are checked (`check_specs`) before anything runs.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from prbench.config import MAX_ITEMS, PlanSettings, SampleSettings
from prbench.context.conditions import ALL_CONDITIONS, CONDITIONS
from prbench.errors import DataError, PrbenchError, SpecError
from prbench.registry import ENGINES, GRADERS, RETRIEVERS, REWARDS, STAGES
from prbench.schema import one_of
from prbench.specs import check_options, resolve_spec


def _known_stage(name: str) -> str:
    """A stage name from the stage registry (built in or a plug-in); the runner orders stages by their rank."""
    if name not in STAGES:
        raise ValueError(STAGES.unknown(name))
    return name


Stage = Annotated[str, AfterValidator(_known_stage)]


MAX_BYTES = 1 << 20


# Strict whole numbers in [1, hi] (`5.0`, `"5"`, `true` and `0` are refused).
TopK = Annotated[int, Field(strict=True, ge=1, le=10_000)]
BatchSize = Annotated[int, Field(strict=True, ge=1, le=65536)]


Limit = Annotated[int | None, Field(strict=True, ge=1, le=MAX_ITEMS)]
Seed = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]
# Counts inside free-form `options` that decide how much work or memory a stage takes.
OPTION_COUNTS = {"num_generations": (1, 1024), "n": (1, 4096), "k": (1, 4096), "chunk": (1, 4096),
                 "batch_size": (1, 65536), "max_new_tokens": (1, 65536), "max_length": (1, 1 << 20),
                 "top_k": (1, 10_000), "steps": (1, 10**6), "retries": (0, 100),
                 "retries_on_parse_failure": (0, 100), "max_retries": (0, 100), "limit": (1, MAX_ITEMS),
                 "gradient_accumulation_steps": (1, 4096)}
Options = dict[str, Any]


def _check_format(v: str | None) -> str | None:
    """A format spec checked now (name and options), so --dry-run reports it with its YAML line."""
    if v is not None:
        from prbench.formats import load_reader

        try:
            load_reader(v)
        except PrbenchError as exc:
            raise ValueError(str(exc)) from None
    return v


def _check_options(v: dict[str, Any]) -> dict[str, Any]:
    for name, value in v.items():
        bounds = OPTION_COUNTS.get(name)
        if bounds is None:
            continue
        lo, hi = bounds
        if type(value) is not int or not lo <= value <= hi:
            raise ValueError(f"options.{name} must be a whole number from {lo} to {hi}, got {value!r}"[:200])
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a key is an error, not a silent default

    @field_validator("condition", check_fields=False)
    @classmethod
    def _known_condition(cls, v: str) -> str:
        return one_of(v, CONDITIONS, "condition")

    @field_validator("options", check_fields=False)
    @classmethod
    def _bounded_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_options(v)


class ModelEntry(_Strict):
    """One RM or judge: its spec, its conditions (default: the study's) and constructor options."""

    spec: str
    conditions: list[str] | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    both_orders: bool = False
    limit: Limit = None  # this model's items (first N); default: the study's limit
    published: dict[str, dict[str, float]] | None = None  # {condition: {category: accuracy %}}
    batch: bool = False  # API judges: send the eval requests as provider batches (prbench.engines.batch)
    max_usd: float | None = Field(default=None, ge=0)  # API judges: stop each of this model's runs before it passes this

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        for c in v or []:
            one_of(c, ALL_CONDITIONS, "condition")
        return v

    @property
    def pairwise(self) -> bool:
        """Its kind compares two responses (with these options), so it cannot score one alone."""
        from prbench.rewards.base import capabilities

        return capabilities(self.spec, self.options).pairwise


class BenchmarkEntry(_Strict):
    """Another benchmark the study's models are evaluated on (any format), for the cross-benchmark meta table."""

    data: str
    format: str | None = None  # default: detected from the columns
    conditions: list[str] = Field(default_factory=lambda: ["none"])
    limit: Limit = None

    _known = field_validator("conditions")(lambda cls, v: ModelEntry._known(v) or [])
    _format = field_validator("format")(lambda cls, v: _check_format(v))


class PlannerStage(PlanSettings):
    """The study's `planner` section: the driver's own settings plus the planner and its options.

    `limit`: plan the first N items; `planner`-condition runs then cover those N.
    """

    spec_fields: ClassVar[dict[str, str]] = {"spec": "engine"}
    spec: str
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _bounded_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_options(v)


class SampleStage(SampleSettings):
    """The study's `sample` section: the driver's own settings (one default each) plus what it samples."""

    spec_fields: ClassVar[dict[str, str]] = {"policy": "engine"}
    policy: str
    options: dict[str, Any] = Field(default_factory=dict)  # the policy engine's options

    _bounded_options = field_validator("options")(lambda cls, v: _check_options(v))


FAST_METHODS = ["lore", "vpl", "pal", "context-bt"]


class PersonalizeStage(BaseModel):
    """The study's `personalize` section: which personalized-RM methods to train and compare."""

    model_config = ConfigDict(extra="forbid")

    data: str | None = None  # training pairs; default: the study's data
    methods: list[str] = Field(default_factory=lambda: list(FAST_METHODS), min_length=1)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)  # method -> config options
    condition: str = "profile"
    ks: list[Annotated[int, Field(strict=True, ge=0, le=100_000)]] = Field(
        default_factory=lambda: [0, 1, 2, 4, 8, 16], min_length=1)
    draws: int = Field(default=5, strict=True, ge=1, le=100)
    holdout_users: float = Field(default=0.25, gt=0, lt=1)
    holdout_items: float = Field(default=0.5, gt=0, lt=1)

    _condition = field_validator("condition")(lambda cls, v: one_of(v, CONDITIONS, "condition"))

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, v: list[str]) -> list[str]:
        from prbench.train.methods import METHODS

        for m in v:
            one_of(m, tuple(METHODS), "method")
        return v

    @field_validator("options")
    @classmethod
    def _method_options(cls, v: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        """Each method's options built into its settings now, not after the main eval has run."""
        from prbench.train.methods import make_config

        methods = info.data.get("methods") or []
        for m, opts in v.items():
            if m not in methods:
                raise ValueError(f"options for {m!r}, which is not in methods ({', '.join(methods)})")
            try:
                make_config(m, opts)
            except PrbenchError as exc:
                raise ValueError(f"{m}: {exc}") from None
        return v


M = TypeVar("M", bound=BaseModel)


class StudyConfig(_Strict):
    """A whole study. Paths are relative to the config file's folder unless absolute."""

    name: str = Field(min_length=1, pattern=r"\S")
    description: str = ""
    data: str = "sample"
    format: str | None = None  # the format of `data` (default: detected)
    benchmarks: list[BenchmarkEntry] = Field(default_factory=list)  # more benchmarks for the same models
    out: str = "prbench-study"
    seed: Seed = 0
    limit: Limit = None
    until: str | None = None  # eval stage: stop early (ci=W or decided[=M], prbench.evaluation.sequential); `limit` caps it
    until_max: Limit = None  # with `until`: at most this many items per run
    categories: list[str] | None = None
    conditions: list[str] = Field(default_factory=lambda: ["none", "profile", "oracle", "wrong-profile"])
    top_k: TopK = 10
    retriever: str = "bm25"
    batch_size: BatchSize = 16
    models: list[ModelEntry]
    stages: list[Stage] = Field(default_factory=lambda: ["eval", "meta", "report"], min_length=1)
    personalize: PersonalizeStage | None = None
    # Each stage's own section (`bon:`, `planner:`, a plug-in's), by its key: read as `section(key, model)`.
    sections: dict[str, Any] = Field(default_factory=dict)
    hardware: str = ""
    estimates: dict[str, str] = Field(default_factory=dict)

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return ModelEntry._known(v) or []

    _format = field_validator("format")(lambda cls, v: _check_format(v))

    @field_validator("until")
    @classmethod
    def _rule(cls, v: str | None) -> str | None:
        from prbench.evaluation.sequential import StopRule

        if v is None:
            return v
        try:
            return str(StopRule.parse(v))
        except PrbenchError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="before")
    @classmethod
    def _stage_sections(cls, data: Any) -> Any:
        """A top-level key naming a stage's section is that section (any other unknown key is refused)."""
        if not isinstance(data, dict):
            return data
        keys = section_stages()
        own = {k: v for k, v in data.items() if isinstance(k, str) and k not in cls.model_fields and k in keys}
        if not own:
            return data
        return {**{k: v for k, v in data.items() if k not in own}, "sections": {**data.get("sections", {}), **own}}

    def section(self, key: str, model: type[M]) -> M | None:
        """The `key:` section of the study file as its stage's model (validated at load), None when absent."""
        value = self.sections.get(key)
        if value is None or isinstance(value, model):
            return value
        raise PrbenchError(f"study config: section {key!r} is not a {model.__name__}; validate the config first "
                           "(load_study_config, or run_study, checks every section)")


def section_stages() -> dict[str, Any]:
    """Section key -> the registered Stage declaring that section (built-in and plug-in stages alike)."""
    out: dict[str, Any] = {}
    for name in STAGES.names():
        try:
            st: Any = STAGES.get(name)
        except PrbenchError:
            continue  # a broken plug-in: the stage registry says why when a study names it
        if st.section is not None:
            out[st.section_key] = st
    return out


def _line_of(root: yaml.Node, loc: tuple[Any, ...]) -> int | None:
    """1-based YAML line of the node at pydantic location `loc` (deepest node that exists)."""
    node, line = root, root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            node = match[1]
            line = match[0].start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases before anything is expanded."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _AliasFound(event.start_mark.line + 1)
        return super().compose_node(parent, index)


def _duplicate_key(node: yaml.Node | None) -> tuple[int, str, int] | None:
    """(line, key, first line) of the first key given twice in one mapping (YAML keeps the last silently)."""
    from collections import deque

    queue = deque([node] if node is not None else [])
    while queue:
        n = queue.popleft()
        if isinstance(n, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, v in n.value:
                key = str(k.value)
                if key in seen:
                    return k.start_mark.line + 1, key, seen[key]
                seen[key] = k.start_mark.line + 1
                queue.append(v)
        elif isinstance(n, yaml.SequenceNode):
            queue.extend(n.value)
    return None


class _AliasFound(Exception):
    def __init__(self, line: int):
        self.line = line


def _decode(data: str | bytes, source: str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if len(data) > MAX_BYTES:
        raise DataError(source, None, None, f"a study config is at most {MAX_BYTES // 1024} KiB; this one is larger")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(source, line, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
                        ) from None


def parse_study(text: str | bytes, source: str, root: Path | None = None) -> StudyConfig:
    """Validate YAML text; errors name the source, the YAML line and the field.

    With `root` (the config's folder), model specs are resolved too (`resolve_specs`).
    """
    text, base = _decode(text, source), root
    loader = _NoAliasLoader(text)
    try:
        root = loader.get_single_node()
        raw = loader.construct_document(root) if root is not None else None
    except _AliasFound as exc:
        raise DataError(source, exc.line, None, "YAML anchors and aliases (&name, *name) are not allowed in a "
                        "study config; write the value out") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(source, mark.line + 1 if mark else None, None, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()
    if dup := _duplicate_key(root):
        raise DataError(source, dup[0], dup[1], f"key given twice (first on line {dup[2]}); YAML would keep only "
                                                "the last silently, so remove one")
    if not isinstance(raw, dict):
        raise DataError(source, 1, None, "a study config must be a YAML mapping")
    try:
        cfg = StudyConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or None
        raise DataError(source, _line_of(root, loc) if root else None, field, _error(err)[:300]) from None
    for loc, msg in stage_sections(cfg):
        raise DataError(source, _line_of(root, loc), ".".join(str(p) for p in loc), msg)
    if base is None:
        return cfg
    return resolve_specs(cfg, base, source, root)


def _error(err: Any) -> str:
    """A pydantic error's message as the study config says it."""
    return "missing required field" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")


def stage_sections(cfg: StudyConfig) -> list[tuple[tuple[Any, ...], str]]:
    """Validate each stage's section with its Stage's `section` model (in place), then what each stage needs;
    (YAML location, message) of every problem, in that order."""
    out: list[tuple[tuple[Any, ...], str]] = []
    declared = section_stages()
    for key, value in list(cfg.sections.items()):
        model = declared[key].section if key in declared else None
        if model is None or isinstance(value, model):
            continue
        try:
            cfg.sections[key] = model.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            out.append(((key, *err["loc"]), _error(err)[:300]))
    if out:
        return out  # what the stages ask of the config reads their sections as their models
    out += _requirements(cfg)
    running: list[Any] = [STAGES.get(name) for name in dict.fromkeys(cfg.stages)]
    used = {k for st in running for k in (st.section_key, *st.needed)}
    shipped = STAGES.shipped()  # a built-in stage's section may stay when the stage does not run, as before
    unused = sorted(k for k in cfg.sections
                    if k not in used and (k not in declared or declared[k].name not in shipped))
    if unused:
        msg = f"section {unused[0]!r} belongs to a stage this study does not run (add it to stages or remove it)"
        out.append(((unused[0],), msg))
    return out


def _requirements(cfg: StudyConfig) -> list[tuple[tuple[Any, ...], str]]:
    """(YAML location, message) for every stage or condition whose sections are missing, and each stage's checks."""
    out: list[tuple[tuple[Any, ...], str]] = []
    for i, name in enumerate(cfg.stages):
        st: Any = STAGES.get(name)
        missing = [s for s in st.needed if s not in cfg.sections]
        if missing:
            need = " and a ".join(repr(m) for m in missing)
            out.append((("stages", i), f"stage {name!r} needs a {need} section" + (f" ({st.why})" if st.why else "")))
    if "planner" not in cfg.sections:
        if "planner" in cfg.conditions:
            out.append((("conditions",), "condition 'planner' needs a 'planner' section (the planner model)"))
        for i, m in enumerate(cfg.models):
            if "planner" in (m.conditions or []):
                out.append((("models", i, "conditions"),
                            "condition 'planner' needs a 'planner' section (the planner model)"))
    if not cfg.models and any(s in cfg.stages for s in ("eval", "bon", "meta", "report")):
        out.append((("models",), "no models: the study would evaluate nothing (list at least one under models)"))
    for name in dict.fromkeys(cfg.stages):
        st = STAGES.get(name)
        if st.checks is not None and not any(s not in cfg.sections for s in st.needed):
            out += st.checks(cfg)
    return out


# -- model specs: resolved by their kinds (prbench.specs) before anything runs ----------------
def resolve_engine(spec: str, root: Path) -> str:
    return resolve_spec(ENGINES, spec, root)


def resolve_rm(spec: str, root: Path) -> str:
    """The RM spec with local paths made absolute, after its kind checked every part of it names something."""
    return resolve_spec(REWARDS, spec, root)


def resolve_grader(spec: str, root: Path) -> str:
    """A grader kind's spec (`embedding:...`), or an engine spec graded by an LLM rubric."""
    prefix = spec.partition(":")[0]
    if prefix in GRADERS:
        return resolve_spec(GRADERS, spec, root)
    if prefix in ENGINES:
        return resolve_engine(spec, root)
    raise SpecError(GRADERS.unknown(prefix, extra=ENGINES.names()))


# What a section model's `spec_fields` name: the kind of spec each field holds (a list field: each item).
RESOLVERS = {"engine": resolve_engine, "rm": resolve_rm, "grader": resolve_grader}


def _check_model_options(cfg: StudyConfig) -> list[tuple[tuple[Any, ...], str]]:
    """(YAML location, message) of a model entry whose options its kind does not take."""
    for i, m in enumerate(cfg.models):
        try:
            check_options(REWARDS, m.spec, m.options)
        except PrbenchError as exc:
            return [(("models", i, "options"), str(exc))]
    return []


def resolve_specs(cfg: StudyConfig, root: Path, source: str | None = None, node: yaml.Node | None = None
                  ) -> StudyConfig:
    """Every spec of the study checked (no weights loaded) and its relative paths made absolute.

    Why before anything runs: a typo in the third model must not surface after the first two ran,
    and a dry run must not plan calls to a model that does not exist.
    """
    data = cfg.model_dump(exclude_unset=True)  # what the file set stays set: study_defaults fills the rest
    # (location in `data`, YAML location, resolver): the models' specs, then each section's (its `spec_fields`)
    fields: list[tuple[tuple[Any, ...], tuple[Any, ...], Any]] = [
        (("models", i, "spec"), ("models", i, "spec"), resolve_rm) for i in range(len(cfg.models))]
    for st in sorted(section_stages().values(), key=lambda st: st.order):
        key, sec = st.section_key, (data.get("sections") or {}).get(st.section_key)
        for name, what in getattr(st.section, "spec_fields", {}).items():
            value = sec.get(name) if isinstance(sec, dict) else None
            at = [(name, j) for j in range(len(value))] if isinstance(value, list) else [(name,)]
            fields += [(("sections", key, *a), (key, *a), RESOLVERS[what]) for a in at]
    for path, loc, fn in fields:
        parent: Any = data
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else parent[part]
            if parent is None:
                break
        if parent is None or (isinstance(parent, dict) and parent.get(path[-1]) is None):
            continue
        try:
            parent[path[-1]] = fn(parent[path[-1]], root)
        except PrbenchError as exc:
            field = ".".join(str(p) for p in loc)
            if source is None:
                raise PrbenchError(f"{field}: {exc}") from None
            raise DataError(source, _line_of(node, loc) if node is not None else None, field, str(exc)) from None
    for loc, msg in _check_model_options(cfg):
        if source is None:
            raise PrbenchError(f"{'.'.join(map(str, loc))}: {msg}")
        raise DataError(source, _line_of(node, loc) if node is not None else None, ".".join(map(str, loc)), msg)
    retr = cfg.retriever.partition(":")[0]

    if retr not in RETRIEVERS:
        msg = RETRIEVERS.unknown(retr)
        raise (PrbenchError(f"retriever: {msg}") if source is None else
               DataError(source, _line_of(node, ("retriever",)) if node is not None else None, "retriever", msg))
    out = StudyConfig.model_validate(data)
    for loc, msg in stage_sections(out):  # the copy holds plain dicts again: the stages' models read them
        raise DataError(source or "study config", _line_of(node, loc) if node else None, ".".join(map(str, loc)), msg)
    return out


def list_presets() -> dict[str, str]:
    """Preset name -> the first sentence of its description (whole: never cut at a line break)."""
    out = {}
    for res in sorted(resources.files("prbench.presets").iterdir(), key=lambda r: r.name):
        if res.name.endswith(".yaml"):
            cfg = yaml.safe_load(res.read_text(encoding="utf-8"))
            sentences = re.split(r"(?<=[.?!])\s+(?=[A-Z`])", " ".join(str(cfg.get("description") or "").split()))
            line = sentences[0]
            for more in sentences[1:]:  # a question as a title reads better with its answer
                if len(line) >= 60:
                    break
                line += " " + more
            out[res.name[:-5]] = line
    return out


def load_study_config(path: str | Path | None = None, preset: str | None = None) -> tuple[StudyConfig, Path]:
    """A config from a file or a shipped preset, plus the folder relative paths resolve against."""
    if preset:
        res = resources.files("prbench.presets") / f"{preset}.yaml"
        if not res.is_file():
            raise PrbenchError(f"no preset {preset!r} (available: {', '.join(list_presets())})")
        return parse_study(res.read_bytes(), f"preset:{preset}", Path.cwd()), Path.cwd()
    if path is None:
        raise PrbenchError("give a study config file or --preset NAME")
    p = Path(path)
    if not p.is_file():
        raise PrbenchError(f"study config not found: {p}")
    with p.open("rb") as fh:
        data = fh.read(MAX_BYTES + 1)  # never more than the cap in memory
    return parse_study(data, str(p), p.parent.resolve()), p.parent
