"""`rm-bench`: RM-Bench, 3 chosen x 3 rejected style variants per prompt.

Source: github.com/THU-KEG/RM-Bench at 73c52d7 (2025-07-18): `scripts/utils.py`
`split_dataset_by_domain` (L34-45) and `compute_accuracy` (L48-112); data `data/total_dataset.json`
(`id, prompt, chosen[3], rejected[3], domain`) and the per-domain `data/{chat, code, math,
safety-refuse, safety-response}_filtered.json` (`id, subset, prompt, chosen[3], rejected[3]`, no
`domain`). The three variants are, in order, concise, detailed plain text, detailed markdown.

A row without `domain` takes it from `subset` when that names a domain, else from the file name
(`chat_filtered.json` -> `chat`); it is detected as rm-bench by its shape (three chosen, three
rejected, no `num_correct`). Each item (id `DOMAIN:id`, since RM-Bench's ids repeat across its
domain files) expands to the 9 pairs (ids `DOMAIN:id#cI-rJ`), rule `matrix`:
the item's credit is its share of strict wins (chosen > rejected, a tie 0) over the grid.

Headline as `compute_accuracy`: items grouped by domain prefix (chat, math, code, safety: the two
safety files merge); per domain the 3x3 matrix of strict-win shares, `hard` the mean of its upper
right (chosen less styled than rejected), `normal` its diagonal, `easy` its lower left; the
reported hard / normal / easy are means over domains and the score the mean of the domain
averages. prbench's `accuracy` (items pooled) is reported beside it as prbench's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prbench.errors import DataError
from prbench.formats.base import Reader, build, row_id, rows, stem, text
from prbench.schema import Example
from prbench.stats import metrics

STYLES = ("concise", "detailed_plain", "detailed_markdown")
DOMAINS = ("chat", "math", "code", "safety")  # split_dataset_by_domain: prefix match, in this order
UPSTREAM = "THU-KEG/RM-Bench@73c52d7 scripts/utils.py L34-112"


def domain_of(name: str) -> str | None:
    return next((d for d in DOMAINS if name.startswith(d)), None)


def _row_domain(row: Mapping[str, Any], file: str, line: int) -> str:
    if "domain" in row:
        return text(row, "domain", file, line)
    subset = row.get("subset")
    if isinstance(subset, str) and domain_of(subset):
        return subset
    name = stem(file).split("_")[0]
    if domain_of(name):
        return name
    raise DataError(file, line, "domain", f"missing, and neither subset {subset!r} nor the file name {stem(file)!r} "
                                          f"starts with {', '.join(DOMAINS)} (RM-Bench names its files "
                                          "chat_filtered.json, ...)")


class RMBench(Reader):
    name = "rm-bench"
    source = "github.com/THU-KEG/RM-Bench scripts/utils.py (split_dataset_by_domain, compute_accuracy)"
    fields = "id, prompt, chosen (3 texts), rejected (3 texts), domain (else subset or file name)"
    headline = ("RM-Bench's: domains merged by prefix (chat, math, code, safety); hard / normal / easy = mean over "
                "domains of the 3x3 strict-win grid's upper right / diagonal / lower left; score = mean of domain "
                "averages")
    priority = 19  # before rewardbench2: a per-domain row also has subset and chosen/rejected lists
    shapes = (("prompt", "chosen", "rejected", "domain"),)

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        chosen, rejected = row.get("chosen"), row.get("rejected")
        if not isinstance(chosen, list) or not isinstance(rejected, list):
            return False
        return "domain" in row or (len(chosen) == len(rejected) == len(STYLES) and "num_correct" not in row)

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        for file, line, row in rows(src, split):
            prompt, domain = text(row, "prompt", file, line), _row_domain(row, file, line)
            sides = {}
            for key in ("chosen", "rejected"):
                value = row.get(key)
                if not isinstance(value, list) or len(value) != len(STYLES):
                    raise DataError(file, line, key, f"must list {len(STYLES)} responses ({', '.join(STYLES)})")
                for i, v in enumerate(value):
                    if not isinstance(v, str) or not v.strip():
                        raise DataError(file, line, f"{key}[{i}]", "must be non-empty text")
                sides[key] = value
            # RM-Bench's ids repeat across domains (23 of chat's 129 are also code ids): qualify by domain
            item = f"{domain}:{row['id']}" if row.get("id") is not None else row_id(src, file, line, domain)
            for i, c in enumerate(sides["chosen"]):
                for j, r in enumerate(sides["rejected"]):
                    yield file, line, build(
                        Example, file, line, id=f"{item}#c{i}-r{j}", item_id=item, variant=f"c{i}-r{j}",
                        rule="matrix", question=prompt, chosen=c, rejected=r, category=domain, profile=[],
                        rubric_aspects=[], format=self.name)

    @classmethod
    def score(cls, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """RM-Bench's numbers from the per-pair records (module docstring)."""
        grids: dict[str, dict[str, np.ndarray]] = defaultdict(dict)  # raw domain -> item -> 3x3 strict wins
        for r in records:
            if r.get("rule") != "matrix":
                continue
            ci, rj = r["variant"].split("-")
            grid = grids[r["category"]].setdefault(r["item"], np.zeros((len(STYLES), len(STYLES))))
            win = metrics.item_credit("strict", [r])
            grid[int(ci[1:]), int(rj[1:])] = np.nan if win is None else win  # an invalid pair voids its item
        by_domain: dict[str, list[np.ndarray]] = defaultdict(list)
        left_out = sorted(d for d in grids if domain_of(d) is None)
        for raw, items in grids.items():
            if domain := domain_of(raw):
                by_domain[domain] += [g for g in items.values() if not np.isnan(g).any()]
        domains = {d: _grid_accuracy(by_domain[d]) for d in DOMAINS if by_domain.get(d)}
        out: dict[str, Any] = {"name": "RM-Bench score", "upstream": UPSTREAM}
        for key in ("hard", "normal", "easy"):
            out[key] = float(np.mean([v[key] for v in domains.values()])) if domains else None
        out["value"] = float(np.mean([v["average"] for v in domains.values()])) if domains else None
        pooled = [g for gs in by_domain.values() for g in gs]
        out.update(domains=domains, absent_domains=[d for d in DOMAINS if d not in domains],
                   prbench_pooled=_grid_accuracy(pooled) if pooled else None,
                   accuracy_is="prbench's: items pooled over every domain, bootstrap CI (not RM-Bench's)",
                   definition="RM-Bench's compute_accuracy: per domain (prefix chat/math/code/safety) the 3x3 "
                              "strict-win matrix; hard/normal/easy = mean over domains of its upper right / "
                              "diagonal / lower left; score = mean of domain averages. prbench_pooled: prbench's, "
                              "items of all domains pooled")
        if left_out:
            import warnings

            out["left_out_domains"] = left_out
            warnings.warn(f"rm-bench: domain(s) {', '.join(left_out)} start with none of {', '.join(DOMAINS)}: left "
                          "out of the RM-Bench score, as its split_dataset_by_domain does", stacklevel=2)
        return out


def _grid_accuracy(grids: Sequence[np.ndarray]) -> dict[str, float]:
    """compute_accuracy on one domain: the share of items winning each cell, then its three regions."""
    m = np.sum(grids, axis=0) / len(grids)
    k = len(STYLES) * (len(STYLES) - 1) / 2
    hard, normal, easy = float(np.sum(np.triu(m, 1)) / k), float(np.mean(np.diag(m))), float(np.sum(np.tril(m, -1)) / k)
    return {"hard": hard, "normal": normal, "easy": easy, "average": float(np.mean([hard, normal, easy])),
            "n": len(grids)}
