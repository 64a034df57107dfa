"""The shared base of kinds that write a `downstream.json` (one RM, one setting, per-item values).

A new downstream metric needs only a subclass naming its setting (and, when its values are not
`per_item` at the largest k, its own `item_values`): meta groups its runs by `group_key`, makes
one setting per group and bootstraps over the per-item values; the report lists it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from prbench.downstream.results import DEFAULT_SCALE
from prbench.errors import DataError, PrbenchError
from prbench.runkinds.base import EEEItem, EEEPart, MetaOptions, Names, Run, RunKind, Setting
from prbench.store.runs import read_json, regular_file


class DownstreamSummary(BaseModel):
    """downstream.json as readers use it: the curve's core fields (checked by `results.validate`) and the extras
    every downstream driver may write, typed; a kind with more extras subclasses it."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    rm: str
    setting: str
    grader: str
    scale: str = DEFAULT_SCALE
    n_items: int
    data: str | None = None  # the data set the items came from (older files: from config.json, see `dataset`)
    condition: str | None = None
    policy: str | None = None
    w: float | None = None
    candidates_k: int | None = None
    chunk: int | None = None
    temperature: float | None = None
    reward_norm: str | None = None
    metric: str | None = None
    seed: int | None = None
    samples: str | None = None  # the samples (or run) folder the outcomes were read from
    rm_fingerprint: dict[str, Any] | str | None = None


class BonSummary(DownstreamSummary):
    """A Best-of-N downstream.json: the oracle and random-pick curves on the same items, and first-k draws."""

    oracle: list[float] | None = None
    random: list[float] | None = None
    n_samples: int | None = None
    per_item_first_k: dict[str, dict[str, float]] | None = None


class RLSummary(DownstreamSummary):
    """An RL downstream.json: the trained policy's held-out grades (and the untrained policy's, when graded)."""

    steps: int | None = None
    heldout_items: int | None = None


class DownstreamItem(BaseModel):
    """One item of a downstream curve: its value at each k (the per-item record of bon, rl, rgd and plug-ins)."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)
    id: str
    values: dict[str, float]


DEFAULT_GROUP = ("condition", "policy", "w", "candidates_k", "chunk", "temperature", "reward_norm", "metric")


class DownstreamKind(RunKind):
    """A downstream setting read from downstream.json files (validated field by field by
    `prbench.downstream.results.validate` into a `DownstreamResult`: the kind's typed summary)."""

    role = "downstream"
    result_model: type[DownstreamSummary] = DownstreamSummary
    record_model = DownstreamItem  # one item of the curve (`run.items`, built from downstream.json's per_item)
    group_fields = DEFAULT_GROUP
    label_fields = (("w", "w"), ("k", "candidates_k"), ("metric", "metric"))
    # no report_section of its own: the report lists its runs with `prbench.report.downstream.downstream_section`

    def check(self, run: Run) -> None:
        """downstream.json is there, names this kind's setting, types its extras, and its curve is its items' mean."""
        super().check(run)
        path = run.path / "downstream.json"
        d = run.ds
        if d is None and self.summary_model is not None:
            return  # a run of this kind without an RM (the plain policy) writes only its summary
        if d is None:
            raise DataError(str(run.path / "summary.json"), None, "run",
                            f"says {self.name!r} but the folder holds no downstream.json; rerun the command that "
                            "wrote this run")
        if d.setting != (self.setting or self.name):
            raise DataError(str(path), None, "setting", f"{d.setting!r}, but summary.json says {self.name!r}; "
                                                        "rerun the command that wrote this run")
        try:
            self.result_model.model_validate(d.to_dict())
        except ValidationError as e:
            err = e.errors()[0]
            raise DataError(str(path), None, ".".join(map(str, err["loc"])), f"{err['msg']}; rerun the command "
                                                                              "that wrote this run") from None
        run.items = [DownstreamItem(id=i, values=v) for i, v in d.per_item.items()]
        for j, k in enumerate(d.k):
            vals = [it.values[str(k)] for it in run.items if str(k) in it.values]
            mean = math.fsum(vals) / len(vals) if vals else None
            if mean is None or abs(d.expected[j] - mean) > 1e-6:
                raise DataError(str(path), None, f"expected[{j}]", f"says {d.expected[j]} at k={k} but per_item "
                                                                   f"gives {mean} over {len(vals)} items; rerun the "
                                                                   "command that wrote this run")

    @classmethod
    def fields_model(cls) -> type[BaseModel] | None:
        """Group and label fields are fields of downstream.json (`result_model`)."""
        return cls.result_model

    def fields(self, run: Run) -> BaseModel:
        return self.result(run)

    def names(self, run: Run) -> Names:
        """downstream.json's RM, data and condition; a field it lacks from the summary beside it (RGD)."""
        if run.downstream is None:
            return super().names(run)
        res, own = self.result(run), super().names(run)
        return Names((res.rm,), res.data if res.data is not None else own.data,
                     res.condition if res.condition is not None else own.condition,
                     res.policy if res.policy is not None else own.policy)

    def result(self, run: Run) -> DownstreamSummary:
        """downstream.json as this kind's typed model (validated when the run was opened)."""
        if run.downstream is None:
            raise PrbenchError(f"{run.path}: no downstream.json")
        return self.result_model.model_validate(run.ds.to_dict())

    def dataset(self, run: Run) -> str | None:
        """The data set of the run's items: downstream.json's `data`, else the config.json beside it, else the
        config.json of the samples folder it read (Best-of-N files written before `data` was recorded)."""
        res = self.result(run)
        if res.data:
            return res.data
        for folder in (run.path, Path(res.samples) if res.samples else None):
            cfg_path = folder / "config.json" if folder is not None else None
            if cfg_path is not None and regular_file(cfg_path):
                cfg = read_json(cfg_path)
                if isinstance(cfg, dict) and isinstance(cfg.get("data"), str):  # config.json: not a summary
                    return cfg["data"]
        return None

    def group_key(self, run: Run) -> tuple:
        d = run.ds
        return (d.setting, d.grader, d.scale,
                tuple(sorted((f, repr(v)) for f, v in self.values(run, self.group_fields).items())))

    def item_values(self, run: Run, opts: MetaOptions) -> dict[str, float]:
        """Item id -> the outcome meta ranks RMs by (the value at the largest k)."""
        return run.ds.item_values()

    def params(self, run: Run) -> dict:
        d = run.ds
        return {"grader": d.grader, "scale": d.scale,
                **{f: v for f, v in self.values(run, self.group_fields).items() if v is not None}}

    def groups(self, runs: Sequence[Run], notes: list[str]) -> list[dict[str, Run]]:
        """Runs by setting (group key), then by RM; an RM twice in a setting keeps the later run, with a note."""
        grouped: dict[tuple, dict[str, Run]] = {}
        for run in runs:
            members = grouped.setdefault(self.group_key(run), {})
            if run.key in members:
                notes.append(f"{self.name}: {run.key} appears twice ({members[run.key].path / 'downstream.json'} and "
                             f"{run.path / 'downstream.json'}); using {run.path / 'downstream.json'}")
            members[run.key] = run
        return [members for _, members in sorted(grouped.items(), key=lambda kv: str(kv[0]))]

    def meta_settings(self, runs: Sequence[Run], opts: MetaOptions, notes: list[str]) -> list[Setting]:
        out = []
        for members in self.groups(runs, notes):
            first = next(iter(members.values()))
            out.append(Setting(self.label(first), self.setting or self.name,
                               {rm: self.item_values(r, opts) for rm, r in members.items()},
                               condition=first.names.condition, params=self.params(first),
                               sources={rm: str(r.path / "downstream.json") for rm, r in sorted(members.items())}))
        return out

    def source_details(self, run: Run) -> dict[str, str]:
        """What an export names of where the outcomes came from (folder names only: never a local absolute path)."""
        res = self.result(run)
        out = {"condition": res.condition, "policy": res.policy,
               "samples": Path(res.samples).name if res.samples else None}
        return {k: str(v) for k, v in out.items() if v is not None}

    def eee_parts(self, run: Run) -> list[EEEPart]:
        """One result per k of the curve (k = 1 for one value per item), with the per-item values at that k."""
        d = run.ds
        if d is None:
            return []
        top = 2.0 if d.scale == DEFAULT_SCALE else None
        name = self.label(run)
        out = []
        for i, k in enumerate(d.k):
            items = [EEEItem(item, float(vals[str(k)]), top is not None and vals[str(k)] >= top,
                             f"{vals[str(k)]:g}", "the scale's maximum" if top is not None else d.scale,
                             {"setting": d.setting, "k": str(k)})
                     for item, vals in d.per_item.items() if str(k) in vals]
            out.append(EEEPart(
                result_id=f"{d.setting}:k={k}", name=name if len(d.k) == 1 else f"{name} k={k}",
                metric_id=f"{d.setting}_expected", metric_name=f"{self.short or self.name} ({d.scale})",
                description=self.value_definition or f"{d.setting}: mean per-item value ({d.scale})",
                score=float(d.expected[i]), ci=(d.ci_low[i], d.ci_high[i]), n=len(items), bounds=(0.0, top),
                source=f"downstream.json per_item[id][{k}]", extraction_method=f"grader {d.grader}", items=items,
                details={"grader": d.grader, "scale": d.scale, "first_k": f"{d.first_k[i]:g}"},
                source_details=self.source_details(run)))
        return out
