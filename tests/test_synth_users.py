"""The synthetic planted-preference benchmark: valid, deterministic, balanced, and readable only via the user.

Everything here is pure Python (no encoder): it checks the generator's guarantees directly.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest
from typer.testing import CliRunner

from prbench.data import load_examples, write_examples
from prbench.data.synth_users import (
    DIMENSIONS,
    NEUTRAL_POSTS,
    make_users,
    synth_examples,
    twin_group,
)
from prbench.errors import PrbenchError
from prbench.schema import CATEGORIES

_TOKEN = re.compile(r"[a-z0-9]+")


@pytest.fixture(scope="module")
def items():
    return synth_examples(48, 14, seed=0)


def test_same_seed_same_data_other_seed_other_data():
    a = [e.model_dump() for e in synth_examples(10, 7, seed=3)]
    assert a == [e.model_dump() for e in synth_examples(10, 7, seed=3)]
    assert a != [e.model_dump() for e in synth_examples(10, 7, seed=4)]


def test_records_are_valid_benchmark_examples(items, tmp_path):
    path = tmp_path / "synth.jsonl"
    write_examples(items, path)
    loaded = load_examples(path)  # the standard loader validates every record and category
    assert [e.id for e in loaded] == [e.id for e in items]
    assert {e.category for e in loaded} == set(CATEGORIES)
    for e in loaded:
        assert e.user_id and e.profile and e.chosen != e.rejected
        planted = next(d for d in DIMENSIONS if d.name == e.planted["dimension"])
        pole = next(p for p in planted.poles if p.name == e.planted["chosen_pole"])
        assert e.category == planted.category
        assert e.rubric_aspects[0].aspect == pole.aspect  # the rubric names the planted preference
        for a in e.rubric_aspects:
            assert a.evidence and a.evidence in e.narrative  # evidence is an exact narrative span


def test_users_are_distinct_and_every_dimension_balanced():
    users = make_users(48, seed=0)
    vectors = [tuple(u.prefs[d.name] for d in DIMENSIONS) for u in users]
    assert len(set(vectors)) == 48
    for d in DIMENSIONS:
        assert sum(u.prefs[d.name] for u in users) == 24
    by_twin = defaultdict(list)
    for u in users:
        by_twin[twin_group(u.user_id)].append(u)
    for a, b in by_twin.values():
        assert all(a.prefs[k] != b.prefs[k] for k in a.prefs)  # twins are opposite everywhere


def test_more_users_than_preference_types_repeat_types_but_stay_balanced():
    users = make_users(20, seed=1, dimensions=["diet", "mood"])
    assert len({tuple(u.prefs.values()) for u in users}) == 4
    assert sum(u.prefs["diet"] for u in users) == 10
    assert len({u.user_id for u in users}) == 20


def test_profiles_reveal_every_preference(items):
    users = make_users(48, seed=0)
    for u in users:
        counts = Counter(u.post_dims.values())
        assert all(counts[d.name] == 2 for d in DIMENSIONS) and counts[""] == 2
        for post in u.profile:
            dim = u.post_dims[post.id]
            if dim:
                d = next(x for x in DIMENSIONS if x.name == dim)
                fills = {p.name: [re.escape(t).replace(r"\{day\}", ".*").replace(r"\{person\}", ".*")
                                  .replace(r"\{Person\}", ".*") for t in p.posts] for p in d.poles}
                mine = u.pole(d).name
                assert any(re.fullmatch(f, post.text) for f in fills[mine])


def test_each_dimension_has_a_topic_word_shared_by_its_questions_and_posts_only():
    """So BM25 retrieval finds the posts that matter for a question (as on real profiles)."""
    for d in DIMENSIONS:
        texts = list(d.questions) + [t for p in d.poles for t in p.posts]
        assert all(d.topic in _TOKEN.findall(t.lower()) for t in texts)
        others = [t for o in DIMENSIONS if o is not d for p in o.poles for t in p.posts]
        others += [t for t, _ in NEUTRAL_POSTS]
        assert not any(d.topic in _TOKEN.findall(t.lower()) for t in others)


def test_chosen_and_rejected_are_exchangeable_without_the_profile(items):
    # Each pole is chosen exactly as often as the other, per dimension.
    chosen = Counter((e.planted["dimension"], e.planted["chosen_pole"]) for e in items)
    for d in DIMENSIONS:
        assert chosen[(d.name, d.poles[0].name)] == chosen[(d.name, d.poles[1].name)]
    # The same question is asked of users on both sides.
    sides = defaultdict(set)
    for e in items:
        sides[e.question].add(e.planted["chosen_pole"])
    assert sum(len(s) == 2 for s in sides.values()) / len(sides) > 0.5
    # Length carries no signal: a longer-wins baseline is at chance, mean lengths match.
    wins = [1.0 if len(e.chosen) > len(e.rejected) else 0.5 if len(e.chosen) == len(e.rejected) else 0.0
            for e in items]
    assert 0.45 <= sum(wins) / len(wins) <= 0.55
    mean_c = sum(len(e.chosen.split()) for e in items) / len(items)
    mean_r = sum(len(e.rejected.split()) for e in items) / len(items)
    assert abs(mean_c - mean_r) / mean_r < 0.02


def test_pairs_are_minimal_same_skeleton_and_tip(items):
    for e in items:
        assert e.chosen.split(". ")[-1] == e.rejected.split(". ")[-1]  # same closing tip
        assert e.chosen.split()[0] == e.rejected.split()[0]
        assert 0.6 < len(e.chosen) / len(e.rejected) < 1.6


def test_items_cycle_through_dimensions(items):
    per_user = defaultdict(Counter)
    for e in items:
        per_user[e.user_id][e.planted["dimension"]] += 1
    assert all(set(c.values()) == {2} for c in per_user.values())  # 14 items over 7 dimensions


def test_bad_arguments_are_clear_errors():
    with pytest.raises(PrbenchError, match="unknown synthetic dimension"):
        synth_examples(4, 2, dimensions=["diet", "astrology"])
    with pytest.raises(PrbenchError, match="posts_per_dim"):
        make_users(4, posts_per_dim=9)


def test_cli_synth_users_writes_a_loadable_benchmark(tmp_path):
    import typer

    from prbench.cli.train import synth_users

    app = typer.Typer()
    app.command("synth-users")(synth_users)
    app.command("noop")(lambda: None)  # two commands, so typer keeps the sub-command name
    out = tmp_path / "s.jsonl"
    res = CliRunner().invoke(app, ["synth-users", str(out), "--users", "6", "--items-per-user", "3",
                                   "--dimensions", "diet,mood", "--seed", "2"])
    assert res.exit_code == 0, res.output
    loaded = load_examples(out)
    assert len(loaded) == 18 and len({e.user_id for e in loaded}) == 6
    assert {e.planted["dimension"] for e in loaded} == {"diet", "mood"}
