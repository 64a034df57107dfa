"""`until`: score runs on a growing seeded prefix until a stopping rule holds (`prbench.evaluation.sequential`).

The one implementation behind `evaluate(..., until=...)`, `prbench eval --until` and a study's `until`: the
runs are raced together (under `decided` a run stops once its every comparison is settled), each look extends
the run folders, and each run's summary gets its `sequential` block (rule, items used, why it stopped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prbench.capabilities.eval.settings import EvalSettings
from prbench.errors import PrbenchError
from prbench.evaluation.sequential import StopRule, count_items, until_runs
from prbench.schema import Example
from prbench.store.records import EvalSummary, typed_summary


@dataclass(frozen=True)
class EvalRun:
    """One run of `evaluate` with its own settings: its model (a `RewardModel` or a `ModelHandle`), condition and
    settings (under `until` a `limit` there caps its prefix), and the `evaluate` keywords it is scored with
    (`max_usd`, `batch`...). A study's runs differ in these; `evaluate` takes a list of them as its models."""

    model: Any
    condition: str
    settings: EvalSettings
    keywords: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> tuple[str, str]:
        """(model, condition) as the stopping reasons name the run: the name its folder and summary carry."""
        return str(self.model.name), self.condition


def check_until(s: EvalSettings, wait: bool = True) -> StopRule:
    """The rule of a sequential evaluation, refused in one line where it cannot run (before the data is read)."""
    if not wait:
        raise PrbenchError("--until looks at the results after each step; it cannot be combined with --no-wait")
    if s.limit is not None:
        raise PrbenchError("--until grows the number of items itself; cap it with --until-max instead of --limit")
    if s.until is None:
        raise PrbenchError("--until-max caps a sequential run: give --until ci=W or --until decided with it")
    return StopRule.parse(s.until)


def evaluate_until(runs: Sequence[EvalRun], data: str | Sequence[Example], rule: str, *,
                   score: Callable[..., Any], paid: Sequence[bool], until_max: int | None = None,
                   out: str | Path | None = None,
                   on_progress: Callable[[int, int, int], None] | None = None) -> list[Any]:
    """Every run on a growing prefix of the seeded order until `rule` holds, `until_max` items are scored or the
    data runs out; one `EvalResult` per run, in order, its summary with the `sequential` block.

    `score(model, data, condition, **keywords)` scores one run (`evaluate`'s own, which imports this module);
    `paid[i]`: run i sends API requests (`decided` scores the free runs on every item first);
    `on_progress(run index, done, total)`: `total` is the items the run may come to score, never a look's size."""
    first = runs[0].settings if runs else EvalSettings()
    n_items = (count_items(data, categories=first.categories, split=first.split, format=first.format)
               if isinstance(data, str) else len({getattr(ex, "item_id", None) or ex.id for ex in data}))

    def at(i: int, n: int, said: Any) -> Any:
        run = runs[i]
        cap = run.settings.limit
        return score(run.model, data, run.condition, **{**_DEFAULTS, "out": out, **run.keywords},
                     settings=run.settings, limit=min(n, cap or n), seeded_order=True, on_progress=said)

    outcome, summaries = until_runs([r.label for r in runs], at, rule, paid=paid, until_max=until_max,
                                    n_items=n_items, on_progress=on_progress)
    return [replace(r, summary=typed_summary(s, (r.path or Path(".")) / "summary.json", EvalSummary), written=s)
            for r, s in zip(outcome.results, summaries, strict=True)]


# the one-run scorer's keywords as `evaluate` defaults them
_DEFAULTS: dict[str, Any] = {"model_options": None, "cache": None, "overwrite": False, "retry_failed": False,
                             "repair": False, "max_usd": None, "prices": None, "batch": False, "wait": True}
