"""Invariants of the built-in sample: what every demo and test runs on."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from prbench.data import load_examples
from prbench.data.stats import dataset_stats
from prbench.schema import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent


def test_counts_and_users() -> None:
    items = load_examples("sample")
    assert len(items) >= 60
    per_cat = Counter(it.category for it in items)
    assert set(per_cat) == set(CATEGORIES) and min(per_cat.values()) >= 20
    users = defaultdict(list)
    for it in items:
        users[it.user_id].append(it)
    assert len(users) >= 15
    for its in users.values():  # one consistent person: the same profile on every item
        assert len({tuple(p.id for p in it.profile) for it in its}) == 1


def test_item_shape() -> None:
    for it in load_examples("sample"):
        assert 15 <= len(it.profile) <= 80, it.id
        assert 3 <= len(it.rubric_aspects) <= 6, it.id
        assert len(it.chosen.split()) <= 100 and len(it.rejected.split()) <= 100, it.id
        assert it.narrative and it.gold_answer
        for a in it.rubric_aspects:
            assert a.evidence and a.evidence in it.narrative, (it.id, a.aspect)
        assert len({p.category for p in it.profile}) >= 3, it.id


def test_no_systematic_length_difference() -> None:
    s = dataset_stats(load_examples("sample"))
    assert 0.4 <= s["share_chosen_longer"] <= 0.6
    assert abs(s["chosen_words"]["mean"] - s["rejected_words"]["mean"]) < 5


def test_source_form_matches_benchmark() -> None:
    bench = {it.id: it for it in load_examples("sample")}
    source = load_examples("sample:source", kind="source")
    assert [s.id for s in source] == list(bench)
    for s in source:
        dumped = s.model_dump()
        assert "chosen" not in dumped and "rejected" not in dumped
        assert s.rubric_aspects == bench[s.id].rubric_aspects and s.profile == bench[s.id].profile


def test_package_data_is_built_from_the_yaml() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_sample.py"), "--check"],
                         check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
