"""Where the downstream commands and the reward server find their inputs: items and local models.

Why a module of its own: the metric drivers (`prbench.downstream`) and the reward server
(`prbench.serve`) both read benchmark items and resolve a policy's tokenizer, and neither may
import the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prbench.data import load_examples
from prbench.errors import DataError, PrbenchError
from prbench.schema import SourceItem


def load_items(src: str | Path, **kwargs: Any) -> list[SourceItem]:
    """Benchmark records or LaMP-QA source records: BoN and RL need only question, profile, rubric."""
    if str(src) == "sample:source":
        return load_examples(src, "source", **kwargs)
    try:
        return load_examples(src, "benchmark", **kwargs)
    except DataError as exc:
        if exc.field not in ("chosen", "rejected"):
            raise
        return load_examples(src, "source", **kwargs)


def resolve_policy(spec: str) -> str:
    """A causal-LM location for `from_pretrained`: `hf:<dir | hub id>`, `builtin:<name>` or a folder."""
    prefix, _, rest = spec.partition(":")
    if prefix == "builtin":
        from prbench.engines.builtin import builtin_path

        return str(builtin_path(rest))
    if prefix == "hf" and rest:
        from prbench.runtime.hub import check_ref

        return check_ref(rest, "hf")  # missing folder or unreachable hub: one line now
    if Path(spec).is_dir():
        return spec
    raise PrbenchError(f"RL needs a local causal LM: hf:<dir>, builtin:<name> or a folder, got {spec!r}")
