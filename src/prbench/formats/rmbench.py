"""`rm-bench`: RM-Bench, 3 chosen x 3 rejected style variants per prompt.

Source: github.com/THU-KEG/RM-Bench README ("data format", `compute_accuracy`) and
`data/total_dataset.json`. Read: `id`, `prompt`, `chosen` (3 texts), `rejected` (3 texts),
`domain`. The three variants are, in order, concise, detailed plain text, detailed markdown.

Each item expands to the 9 pairs (ids `ITEM#cI-rJ`), rule `matrix`: the item's credit is the
mean of strict wins (chosen > rejected, a tie 0) over the grid. Headline as RM-Bench: `hard`
the mean of the upper-right cells (chosen less styled than rejected, I < J), `normal` the
diagonal, `easy` the lower-left (I > J), each over items; pooled and per domain; the score is
the mean over domains of each domain's 9-cell average.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prbench.errors import DataError
from prbench.formats.base import Reader, build, row_id, rows, text
from prbench.schema import Example

STYLES = ("concise", "detailed_plain", "detailed_markdown")


class RMBench(Reader):
    name = "rm-bench"
    source = "github.com/THU-KEG/RM-Bench README (data format, compute_accuracy)"
    fields = "id, prompt, chosen (3 texts), rejected (3 texts), domain"
    priority = 22

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        return "domain" in row and isinstance(row.get("chosen"), list) and isinstance(row.get("rejected"), list)

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        for file, line, row in rows(src, split):
            prompt, domain = text(row, "prompt", file, line), text(row, "domain", file, line)
            sides = {}
            for key in ("chosen", "rejected"):
                value = row.get(key)
                if not isinstance(value, list) or len(value) != len(STYLES):
                    raise DataError(file, line, key, f"must list {len(STYLES)} responses ({', '.join(STYLES)})")
                for i, v in enumerate(value):
                    if not isinstance(v, str) or not v.strip():
                        raise DataError(file, line, f"{key}[{i}]", "must be non-empty text")
                sides[key] = value
            item = str(row["id"]) if row.get("id") is not None else row_id(src, file, line, domain)
            for i, c in enumerate(sides["chosen"]):
                for j, r in enumerate(sides["rejected"]):
                    yield file, line, build(
                        Example, file, line, id=f"{item}#c{i}-r{j}", item_id=item, variant=f"c{i}-r{j}",
                        rule="matrix", question=prompt, chosen=c, rejected=r, category=domain, profile=[],
                        rubric_aspects=[])


def _grid_accuracy(cells: Mapping[tuple[int, int], list[float]]) -> dict[str, float | None]:
    def mean(keys: list[tuple[int, int]]) -> float | None:
        vals = [float(np.mean(cells[k])) for k in keys if cells.get(k)]
        return float(np.mean(vals)) if vals else None

    n = len(STYLES)
    return {"hard": mean([(i, j) for i in range(n) for j in range(n) if i < j]),
            "normal": mean([(i, i) for i in range(n)]),
            "easy": mean([(i, j) for i in range(n) for j in range(n) if i > j]),
            "average": mean([(i, j) for i in range(n) for j in range(n)])}


def score(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Hard / normal / easy accuracies pooled and per domain (module docstring)."""
    pooled: dict[tuple[int, int], list[float]] = defaultdict(list)
    by_domain: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("rule") != "matrix" or r.get("credit") is None:
            continue
        ci, rj = r["variant"].split("-")
        cell = (int(ci[1:]), int(rj[1:]))
        c, j = r.get("score_chosen"), r.get("score_rejected")
        win = float(c > j) if c is not None and j is not None else float(r["credit"] == 1.0)
        pooled[cell].append(win)
        by_domain[r["category"]][cell].append(win)
    domains = {d: _grid_accuracy(cells) for d, cells in sorted(by_domain.items())}
    avgs = [d["average"] for d in domains.values() if d["average"] is not None]
    return {"name": "RM-Bench score", "value": float(np.mean(avgs)) if avgs else None, **_grid_accuracy(pooled),
            "domains": domains,
            "definition": "hard = chosen less styled than rejected (upper-right of the 3x3 grid), normal = same style, "
                          "easy = lower-left; strict wins; score = mean over domains of the 9-cell average, as RM-Bench"}
