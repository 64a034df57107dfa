"""The study config: a validated YAML schema whose errors point at the YAML line.

Every stage reuses the run folders and caches of the single commands, so a study resumes,
skips finished work, and a changed config recomputes only what changed.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prbench.conditions import CONDITIONS
from prbench.errors import DataError, PrbenchError
from prbench.study.personalize import PersonalizeStage

Stage = Literal["plan", "eval", "sample", "bon", "rl", "rgd", "policy_accuracy", "personalize", "meta", "report"]
STAGE_ORDER: tuple[str, ...] = ("plan", "eval", "sample", "bon", "rl", "rgd", "policy_accuracy", "personalize", "meta",
                                "report")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a key is an error, not a silent default


class ModelEntry(_Strict):
    """One RM or judge: its spec, its conditions (default: the study's) and constructor options."""

    spec: str
    conditions: list[str] | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    both_orders: bool = False
    limit: int | None = None  # this model's items (first N); default: the study's limit
    published: dict[str, dict[str, float]] | None = None  # {condition: {category: accuracy %}}

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        for c in v or []:
            if c not in CONDITIONS:
                raise ValueError(f"unknown condition {c!r} (use {', '.join(CONDITIONS)})")
        return v


class PlannerStage(_Strict):
    spec: str
    top_k: int = 10
    limit: int | None = None  # plan the first N items; `planner`-condition runs then cover those N
    options: dict[str, Any] = Field(default_factory=dict)


class SampleStage(_Strict):
    policy: str
    n: int = 16
    limit: int | None = None
    temperature: float = 1.0
    top_p: float = 0.9
    max_new_tokens: int = 160
    options: dict[str, Any] = Field(default_factory=dict)


class BonStage(_Strict):
    rms: list[str] | None = None  # default: every pointwise model of the study
    condition: str = "profile"
    grader: str


class RLStage(_Strict):
    policy: str
    rms: list[str]
    condition: str = "profile"
    steps: int = 2
    grader: str | None = None
    limit: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class RGDStage(_Strict):
    policy: str
    rms: list[str]
    condition: str = "oracle"
    w: float = 1.0
    k: int = 10
    chunk: int = 1
    max_new_tokens: int = 48
    limit: int | None = None
    grader: str | None = None


class PolicyAccuracyStage(_Strict):
    policy: str
    rms: list[str]
    condition: str = "oracle"
    w: float = 1.0
    k: int = 10
    limit: int | None = None


class StudyConfig(_Strict):
    """A whole study. Paths are relative to the config file's folder unless absolute."""

    name: str
    description: str = ""
    data: str = "sample"
    out: str = "prbench-study"
    seed: int = 0
    limit: int | None = None
    categories: list[str] | None = None
    conditions: list[str] = Field(default_factory=lambda: ["none", "profile", "oracle", "wrong-profile"])
    top_k: int = 10
    retriever: str = "bm25"
    batch_size: int = 16
    models: list[ModelEntry]
    stages: list[Stage] = Field(default_factory=lambda: ["eval", "meta", "report"])
    planner: PlannerStage | None = None
    sample: SampleStage | None = None
    bon: BonStage | None = None
    rl: RLStage | None = None
    rgd: RGDStage | None = None
    policy_accuracy: PolicyAccuracyStage | None = None
    personalize: PersonalizeStage | None = None
    hardware: str = ""
    estimates: dict[str, str] = Field(default_factory=dict)

    @field_validator("conditions")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return ModelEntry._known(v) or []


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


def parse_study(text: str, source: str) -> StudyConfig:
    """Validate YAML text; errors name the source, the YAML line and the field."""
    try:
        root = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(source, mark.line + 1 if mark else None, None, f"invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise DataError(source, 1, None, "a study config must be a YAML mapping")
    try:
        return StudyConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        field = ".".join(str(p) for p in loc) or None
        msg = "missing required field" if err["type"] == "missing" else err["msg"]
        raise DataError(source, _line_of(root, loc) if root else None, field, msg) from None


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    out = {}
    for res in sorted(resources.files("prbench.presets").iterdir(), key=lambda r: r.name):
        if res.name.endswith(".yaml"):
            cfg = yaml.safe_load(res.read_text(encoding="utf-8"))
            out[res.name[:-5]] = cfg.get("description", "").strip().splitlines()[0] if cfg.get("description") else ""
    return out


def load_study_config(path: str | Path | None = None, preset: str | None = None) -> tuple[StudyConfig, Path]:
    """A config from a file or a shipped preset, plus the folder relative paths resolve against."""
    if preset:
        res = resources.files("prbench.presets") / f"{preset}.yaml"
        if not res.is_file():
            raise PrbenchError(f"no preset {preset!r} (available: {', '.join(list_presets())})")
        return parse_study(res.read_text(encoding="utf-8"), f"preset:{preset}"), Path.cwd()
    if path is None:
        raise PrbenchError("give a study config file or --preset NAME")
    p = Path(path)
    if not p.is_file():
        raise PrbenchError(f"study config not found: {p}")
    return parse_study(p.read_text(encoding="utf-8"), str(p)), p.parent
