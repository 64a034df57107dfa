"""The downstream results file (`downstream.json`): one per RM and setting, read by meta-evaluation.

Why a fixed format: benchmark accuracy and downstream outcome are produced by different
commands (and machines); meta-evaluation joins them per RM and bootstraps over items, so the
per-item values must travel with the curve.

Format (JSON object, `format` = 1):

- `format`: int, this layout's version.
- `rm`: the RM spec string (the join key with benchmark runs).
- `setting`: "bon" (Best-of-N selection), "rl" (policy trained with the RM as reward),
  "rgd" (reward-guided decoding), "policy_accuracy", or the name of a plug-in run kind
  (`prbench.runkinds`; a plug-in kind's setting is its registry name).
- `k`: list of ints. BoN: the subset sizes (1, 2, 4, ..., N). RL/RGD: `[1]` (one value per
  item: the mean grade of the policy's held-out answers).
- `first_k`: per k, mean over items of the grade of the RM's pick among the first k samples
  (the paper's procedure: one fixed draw).
- `expected`: per k, mean over items of the exact expected grade of the RM's pick from a
  uniformly random k-subset of the N samples (no Monte-Carlo noise). For RL/RGD equal to `first_k`.
- `ci_low`, `ci_high`: per k, percentile-bootstrap CI over items of `expected`.
- `per_item`: {item_id: {str(k): expected value}}: what an item-level bootstrap needs.
- `per_item_first_k` (optional): the same for `first_k`.
- `grader`: the grader spec; `n_items`: items in the curve (after excluding invalid ones).
- `scale`: what a value means; by default "mean aspect grade, 0-2" (the paper's item score).
- Optional extras: `oracle`, `random` (curves on the same items), `first_k_ci_low/high`,
  `condition`, `n_excluded` (items dropped, with reasons), `grader_calls`, anything else.

Values that are NaN are not allowed here: items with an invalid grade or score are excluded
and counted in `n_excluded`, never written as numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError
from prbench.registry import RUNKINDS
from prbench.store.runs import read_json, write_json_atomic

FORMAT_VERSION = 1
SETTINGS = ("bon", "rl", "rgd", "policy_accuracy")  # the built-in ones; plug-in kinds add theirs
FILENAME = "downstream.json"
DEFAULT_SCALE = "mean aspect grade, 0-2"


@dataclass
class DownstreamResult:
    """One RM's downstream curve in one setting (see the module docstring for each field)."""

    rm: str
    setting: str
    k: list[int]
    first_k: list[float]
    expected: list[float]
    ci_low: list[float | None]
    ci_high: list[float | None]
    per_item: dict[str, dict[str, float]]
    grader: str
    n_items: int
    scale: str = DEFAULT_SCALE
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": FORMAT_VERSION, "rm": self.rm, "setting": self.setting, "k": self.k,
            "first_k": self.first_k, "expected": self.expected, "ci_low": self.ci_low, "ci_high": self.ci_high,
            "per_item": self.per_item, "grader": self.grader, "n_items": self.n_items, "scale": self.scale,
        }
        for key, value in self.extra.items():
            if key in out:
                raise PrbenchError(f"downstream extra field {key!r} would overwrite a core field")
            out[key] = value
        return out

    def value_at(self, k: int | None = None, curve: str = "expected") -> float:
        """The curve value at `k` (the largest k when None): the usual one-number summary for meta."""
        values = getattr(self, curve)
        idx = len(self.k) - 1 if k is None else self.k.index(k)
        return values[idx]

    def item_values(self, k: int | None = None) -> dict[str, float]:
        """{item_id: expected value at k} for an item-level bootstrap."""
        kk = str(self.k[-1] if k is None else k)
        return {item: vals[kk] for item, vals in self.per_item.items()}


_CORE = ("rm", "setting", "k", "first_k", "expected", "ci_low", "ci_high", "per_item", "grader", "n_items")


def _finite(values: Sequence[Any], name: str, allow_none: bool = False) -> list[Any]:
    out: list[float | None] = []
    for v in values:
        if v is None and allow_none:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise PrbenchError(f"downstream result: {name} holds a non-finite or non-numeric value {v!r}")
        out.append(float(v))
    return out


def validate(data: Mapping[str, Any], where: str = "downstream result") -> DownstreamResult:
    """Check a parsed file and build the result; every problem names the field."""
    if not isinstance(data, Mapping):
        raise PrbenchError(f"{where}: expected a JSON object")
    missing = [k for k in _CORE if k not in data]
    if missing:
        raise PrbenchError(f"{where}: missing field(s) {', '.join(missing)}")
    if data.get("format", FORMAT_VERSION) != FORMAT_VERSION:
        raise PrbenchError(f"{where}: format {data.get('format')!r} is not supported (expected {FORMAT_VERSION})")

    if data["setting"] not in SETTINGS and data["setting"] not in RUNKINDS:
        raise PrbenchError(f"{where}: setting must be one of {', '.join(SETTINGS)} or a plug-in run kind's, "
                           f"got {data['setting']!r}")
    ks = data["k"]
    if not isinstance(ks, list) or not ks or not all(isinstance(k, int) and k >= 1 for k in ks):
        raise PrbenchError(f"{where}: k must be a non-empty list of positive ints")
    if ks != sorted(set(ks)):
        raise PrbenchError(f"{where}: k must be strictly increasing")
    curves = {}
    for name in ("first_k", "expected", "ci_low", "ci_high"):
        vals = data[name]
        if not isinstance(vals, list) or len(vals) != len(ks):
            raise PrbenchError(f"{where}: {name} must be a list with one value per k ({len(ks)})")
        curves[name] = _finite(vals, name, allow_none=name.startswith("ci_"))
    per_item = data["per_item"]
    if not isinstance(per_item, Mapping):
        raise PrbenchError(f"{where}: per_item must be an object {{item_id: {{k: value}}}}")
    clean: dict[str, dict[str, float]] = {}
    for item, vals in per_item.items():
        if not isinstance(vals, Mapping):
            raise PrbenchError(f"{where}: per_item[{item!r}] must be an object {{k: value}}")
        clean[str(item)] = dict(zip(map(str, vals), _finite(list(vals.values()), f"per_item[{item!r}]")))
    if not isinstance(data["n_items"], int) or data["n_items"] != len(clean):
        raise PrbenchError(f"{where}: n_items ({data['n_items']!r}) does not match per_item ({len(clean)} items)")
    extra = {k: v for k, v in data.items() if k not in (*_CORE, "format", "scale")}
    return DownstreamResult(
        rm=str(data["rm"]), setting=data["setting"], k=list(ks), per_item=clean, grader=str(data["grader"]),
        n_items=data["n_items"], scale=str(data.get("scale", DEFAULT_SCALE)), extra=extra, **curves,
    )


def write_downstream(path: str | Path, result: DownstreamResult) -> Path:
    """Write `result` atomically; `path` may be the run folder (then `downstream.json` inside it)."""
    p = Path(path)
    if p.suffix != ".json":
        p = p / FILENAME
    data = result.to_dict()
    validate(data, str(p))  # never write a file the reader would refuse
    write_json_atomic(p, data)
    return p


def read_downstream(path: str | Path) -> DownstreamResult:
    """Read and validate a `downstream.json` (or the folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / FILENAME
    if not p.is_file():
        raise PrbenchError(f"no downstream results at {p}")
    return validate(read_json(p, "rerun the command that wrote it"), str(p))  # damaged JSON: file and line


def find_downstream(root: str | Path) -> list[Path]:
    """Every `downstream.json` under `root`, sorted (meta-evaluation's discovery step)."""
    return sorted(Path(root).rglob(FILENAME))
