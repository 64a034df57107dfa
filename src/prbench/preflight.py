"""Everything a command was given, checked before any model loads or any call is paid for.

A typo in the second `-m` or the last `-c` entry must not cost the hours the first one takes to
score: commands resolve every spec, condition and data source here first, and fail in one line
with a "did you mean" where a close name exists.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path

from prbench.capabilities.eval.settings import EvalSettings
from prbench.context.conditions import ALL_CONDITIONS
from prbench.errors import PrbenchError, SpecError
from prbench.registry import REWARDS
from prbench.runtime.hub import no_such_folder
from prbench.specs import ModelSpec, parse_spec


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """'; did you mean X?' for the closest known name, or ''."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_condition_names(conditions: Sequence[str], known: Sequence[str] = ALL_CONDITIONS) -> list[str]:
    """`conditions` if every one is known, else one line naming the first unknown one."""
    for cond in conditions:
        if cond not in known:
            raise PrbenchError(f"unknown condition {cond!r} (use {', '.join(known)}){did_you_mean(cond, known)}")
    return list(conditions)


def model_specs(specs: Sequence[str], root: Path | None = None) -> dict[str, ModelSpec]:
    """Each spec as given -> its one parse (`prbench.specs.ModelSpec`): names checked by its kind, local folders
    made absolute; the command's later steps (options, run names, the model itself) take that parse.

    Its text is the model's one identity: `hf:tinyrm`, `hf:./tinyrm` and `hf:/abs/path/tinyrm`
    name the same folder, so they are one model and one run; a folder under the working directory keeps
    its short relative name, one elsewhere is absolute. Raises on the first spec that cannot be resolved.
    """
    here = (root or Path.cwd()).resolve()
    out: dict[str, ModelSpec] = {}
    for spec in specs:
        try:
            out[spec] = parse_spec(REWARDS, spec, here)
        except SpecError as exc:
            prefix, _, rest = spec.partition(":")
            if "no such file or folder" in str(exc) and ":" not in rest:  # a folder kind: name the closest sibling
                raise no_such_folder(rest, prefix) from None
            raise
        except PrbenchError as exc:
            raise SpecError(f"{spec}: {exc}") from None
    return out


def check_data(data: str | Path, settings: EvalSettings, conditions: Sequence[str] = ()) -> None:
    """Read and validate the whole data source once (as the run will), before any model loads; a condition
    that needs a field the data lacks (`oracle` without a rubric) is refused here too."""
    from prbench.data import iter_examples
    from prbench.evaluation.evaluate import check_conditions

    if {"oracle", "planner"} & set(conditions):
        check_conditions(str(data), conditions, settings)  # reads every record and checks the fields
    else:
        for _ in iter_examples(str(data), split=settings.split, format=settings.format):
            pass
