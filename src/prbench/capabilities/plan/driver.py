"""`plan()`: the planner's aspects for every example of a benchmark, one JSONL record each (resumable).

Records are `{"id", "aspects": [{"aspect", "reason"}], "planner", "prompt_hash", "failed", "attempts"}`
(and the clipped `raw` output of a failure), what `conditions.read_planner_file` reads. Ids already in
the file are skipped, records are appended and flushed one by one, and a half-written last line from
a crash is cut off before appending. The planner itself (prompt, parsing, retries, cache) is
`prbench.capabilities.plan.planner.Planner`, which the `planner` input condition also uses.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prbench.capabilities.plan.planner import Planner, planner_view
from prbench.config import PlanSettings
from prbench.context.retrieval import load_retriever
from prbench.engines.base import Engine
from prbench.errors import PrbenchError
from prbench.schema import SourceItem
from prbench.store.cache import Cache

log = logging.getLogger(__name__)


@dataclass
class PlanResult:
    path: Path
    written: int
    skipped: int
    failures: int
    info: dict[str, Any] = field(default_factory=dict)


def _done_ids(path: Path) -> set[str]:
    """Ids already planned; a half-written last line (a crash mid-write) is cut off first."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        log.warning("%s: dropping a half-written last line", path)
        with path.open("r+b") as fh:
            fh.truncate(cut)
        data = data[:cut]
    ids = set()
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            ids.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            raise PrbenchError(f"{path}:{n}: not a planner record; use another --out file") from None
    return ids


def plan(
    planner: str | Engine | Planner,
    data: str | Sequence[SourceItem],
    out: str | Path,
    *,
    settings: PlanSettings | None = None,
    cache: Cache | None = None,
    planner_options: dict[str, Any] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> PlanResult:
    """Plan aspects for every example of `data` into the JSONL file `out` (resumable).

    `settings` (or `options` on top of it) are `PlanSettings`.
    """
    from prbench.data import load_examples
    from prbench.evaluation.scoring import example_seed

    s = PlanSettings.build(settings, **options)
    if isinstance(planner, Planner):
        pl = planner
    else:
        pl = Planner(planner, cache=cache, **(planner_options or {}))
    items = (load_examples(data, "source", categories=s.categories, limit=s.limit, split=s.split)
             if isinstance(data, str) else list(data)[:s.limit])
    ret = load_retriever(s.retriever)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _done_ids(path)
    todo = [ex for ex in items if ex.id not in done]
    written = failures = 0
    if on_progress:
        on_progress(len(done), len(items))  # the count before the first (slow) batch: the stage line comes now
    with path.open("a", encoding="utf-8") as fh:
        for start in range(0, len(todo), max(1, s.batch_size)):
            part = todo[start : start + max(1, s.batch_size)]
            views = [planner_view(ex, ret, s.top_k, cache) for ex in part]
            outcomes = pl.plan_views(views, [example_seed(s.seed, ex.id, "planner") for ex in part])
            for o in outcomes:
                rec = {"id": o.id, "aspects": [{"aspect": a.aspect, "reason": a.reason} for a in o.aspects],
                       "planner": pl.spec, "prompt_hash": pl.prompt_hash, "failed": o.failed,
                       "attempts": o.attempts}
                if o.failed and o.raw:
                    rec["raw"] = o.raw
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                written += 1
                failures += bool(o.failed)
            if on_progress:
                on_progress(len(done) + start + len(part), len(items))
    return PlanResult(path, written, len(items) - len(todo), failures,
                      {**pl.info(), "top_k": s.top_k, "retriever": ret.spec, "seed": s.seed})
