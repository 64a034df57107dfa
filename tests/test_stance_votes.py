"""stance's co-vote factors and the whole-profile view a trained folder asks `prbench eval` for (#37).

Planted co-votes: two camps vote on twelve statements whose texts say nothing of the camp (each camp's
six are on mixed, unrelated topics, so sentence similarity cannot group them); only which statements
the same people agreed with can. A record is a person's agreed vs rejected statement, mirrored across
the camps (a scorer that ignores the person gets 50%). The tests silence the projection to see what
the co-vote factors of the training people's votes decide on their own.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_stance import own_and_flipped_scores

from prbench.context.conditions import View
from prbench.data.pairs import PreferencePair
from prbench.rewards.base import PointwiseRM, Score, view_top_k
from prbench.schema import Example, ProfilePost
from prbench.train.methods import METHODS, make_config, spec_for
from prbench.train.protocol import ProtocolConfig, pair_credits

CAMPS = {
    "a": ["The library should open on Sundays", "Dogs belong on a leash in every park",
          "Schools should start an hour later", "The harbour needs a new ferry terminal",
          "Street musicians need no permit", "Tax sugary drinks"],
    "b": ["Plant a thousand trees along the river", "Ban fireworks in residential streets",
          "Build a second public swimming pool", "Cut the council's advertising budget",
          "Allow food trucks in the old town", "Make the town hall archives public online"],
}
BRIEF = {"epochs": 1, "members": 1, "readout": "mean"}  # fast: the projection is silenced where it matters


def covotes(people: int, seed: int) -> list[PreferencePair]:
    rng = random.Random(seed)
    out = []
    for i in range(people // 2):
        a, b = rng.choice(CAMPS["a"]), rng.choice(CAMPS["b"])
        for camp, other, chosen, rejected in (("a", "b", a, b), ("b", "a", b, a)):
            votes = [f"I agree: {t}" for t in CAMPS[camp] if t != chosen]
            votes += [f"I disagree: {t}" for t in CAMPS[other] if t != rejected]
            rng.shuffle(votes)
            out.append(PreferencePair(user_id=f"{camp}-{seed}-{i}", prompt=f"What should the town do next year? ({i % 4})",
                                      chosen=chosen, rejected=rejected, id=f"{camp}-{seed}-{i}",
                                      profile=[ProfilePost(id=f"{camp}{i}-{j}", text=v) for j, v in enumerate(votes)]))
    return out


def _accuracy(rm: Any, pairs: list[PreferencePair]) -> float:
    credits, _ = pair_credits(rm, pairs, "profile", ProtocolConfig(top_k=view_top_k(rm) or 10))
    return sum(c for c in credits if c is not None) / len(credits)


def _trained(tmp: Path, cache: Any, **options: Any) -> Any:
    from prbench.rewards import load_rm

    fn, _ = METHODS["stance"].load()
    fn(covotes(30, seed=0), tmp / "m", make_config("stance", {**BRIEF, **options}), cache=cache)
    return load_rm(spec_for("stance", tmp / "m"), encoder_cache=cache)


def test_covote_factors_decide_where_the_texts_say_nothing(tmp_path: Path, minilm_cache: Any) -> None:
    """With the projection silenced, the co-vote readout alone orders new people's pairs; without factors
    every pair is a tie."""
    test = covotes(30, seed=1)  # new people, the same statements
    with_votes = _trained(tmp_path / "votes", minilm_cache)
    without = _trained(tmp_path / "plain", minilm_cache, votes_rank=0)
    assert with_votes.config["votes"]["texts"] == 12 and without.config["votes"]["texts"] == 0
    for rm in (with_votes, without):
        rm.model.proj.data.zero_()
    assert _accuracy(with_votes, test) >= 0.95
    assert _accuracy(without, test) == 0.5


def test_covote_readout_flips_with_the_persons_signs(tmp_path: Path, minilm_cache: Any) -> None:
    rm = _trained(tmp_path, minilm_cache, votes_weight=1.0)
    rm.model.proj.data.zero_()  # the projection silenced: what is left is the co-vote readout
    pair = covotes(2, seed=3)[0]
    a, b, c, d = own_and_flipped_scores(rm, pair)
    assert a > b and c < d
    unseen = View(example_id="y", question=pair.prompt, condition="profile", posts=tuple(pair.profile), user_id="q")
    assert rm.score([(unseen, "A text no training person ever judged.")])[0].value == 0  # no factor: 0


def test_a_trained_stance_folder_asks_for_the_whole_profile(tmp_path: Path, minilm_cache: Any) -> None:
    rm = _trained(tmp_path, minilm_cache)
    assert view_top_k(rm) == view_top_k(f"stance:{tmp_path / 'm'}") == make_config("stance", {}).top_k > 30
    assert view_top_k(f"stance:{tmp_path / 'nowhere'}") is None and view_top_k("baseline:lexical") is None


class _Counts(PointwiseRM):
    """Scores each view by how many profile items it shows; `view_top_k` as a trained folder would set it."""

    uses_context, calls_model = True, False

    def __init__(self, asks: int | None):
        self.spec, self.view_top_k, self.seen = f"py:counts{asks}", asks, []

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        self.seen += [len(v.posts) for v, _ in batch]
        return [Score(float(len(v.posts))) for v, _ in batch]


def test_eval_shows_the_items_the_model_asks_for_unless_top_k_is_given() -> None:
    from prbench import evaluate

    rows = [Example.model_validate({"id": f"r{i}", "user_id": f"u{i}", "question": "What should the town do?",
                                    "profile": [f"I agree: statement {j} of person {i}" for j in range(30)],
                                    "chosen": "Plant trees.", "rejected": "Cut trees."}) for i in range(3)]
    for asks, given, shown in ((40, {}, 30), (None, {}, 10), (40, {"top_k": 5}, 5)):
        rm = _Counts(asks)
        evaluate(rm, rows, "profile", **given)
        assert set(rm.seen) == {shown}, (asks, given)


@pytest.mark.parametrize("bad", [0, True, "40", None])
def test_view_top_k_ignores_what_is_not_a_count(bad: Any) -> None:
    assert view_top_k(_Counts(bad)) is None


def test_recommend_measures_each_candidate_on_the_views_it_asks_for(minilm_cache: Any) -> None:
    from prbench.train.recommend import CVSettings, recommend

    rec = recommend(covotes(16, seed=0), ["style", "stance"], {"seed": 0, **BRIEF},
                    settings=CVSettings(folds=2, n_boot=100, references=()), cache=minilm_cache)
    views = {c.method: c.top_k for c in rec.candidates}
    assert views == {"style": 10, "stance": make_config("stance", {}).top_k}
