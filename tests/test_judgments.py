"""Profiles made of judgments (#37 item 2): read from every format that has them, shown to judges as
judgments, handed to methods as signed evidence, swapped whole by `wrong-profile`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prbench import evaluate
from prbench.context.conditions import JUDGMENTS_HEADER, PROFILE_HEADER, View, build_view
from prbench.context.judgments import describe, example_evidence, has_judgments, post_evidence, stance_of
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples, write_examples
from prbench.errors import DataError
from prbench.schema import Example, ProfilePost
from prbench.testing.records import make_records

FIX = Path(__file__).parent / "data" / "formats"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the checkout
POLIS = SHARED / "polis-dev"
BM25 = load_retriever("bm25")


def _row(i: int, user: str, profile: list[Any]) -> dict[str, Any]:
    return {"id": f"r{i}", "user_id": user, "question": "What should the council fund first?", "profile": profile,
            "chosen": f"Fund bike lanes on every main road ({i}).", "rejected": f"Fund more car parks downtown ({i})."}


MIXED = [
    "I cycle to work every day.",                                                  # a plain string: a post
    {"text": "Bike lanes save lives.", "stance": "agree"},                         # a stance, no id
    {"id": "v2", "text": "Parking should be free.", "stance": "disagree"},
    {"id": "v3", "text": "I disagree: Cars come first."},                          # a verdict in the text (Polis)
    {"prompt": "Bus or tram?", "chosen": "Trams, they are quieter.", "rejected": "Buses, they are cheaper."},
    {"id": "v5", "text": "Raise the parking fee.", "stance": "pass"},
]


def _mixed_example() -> Example:
    return Example.model_validate(_row(0, "u0", MIXED))


def test_profile_items_read_as_posts_stances_and_choices() -> None:
    ex = _mixed_example()
    ids = [p.id for p in ex.profile]
    assert ids == ["p0", "p1", "v2", "v3", "p4", "v5"]  # an item without an id gets its place
    assert [stance_of(p)[0] for p in ex.profile] == ["post", "agree", "disagree", "disagree", "chose", "pass"]
    choice = ex.profile[4]
    assert choice.is_choice and choice.text == "Trams, they are quieter." and choice.prompt == "Bus or tram?"
    signs = [(e.text, e.sign) for e in post_evidence(ex.profile)]
    assert signs == [("I cycle to work every day.", 1.0), ("Bike lanes save lives.", 1.0),
                     ("Parking should be free.", -1.0), ("Cars come first.", -1.0),
                     ("Trams, they are quieter.", 1.0), ("Buses, they are cheaper.", -1.0),
                     ("Raise the parking fee.", 0.0)]
    assert has_judgments(ex.profile)
    assert [e.sign for e in example_evidence(ex)] == [e.sign for e in post_evidence(ex.profile)]


@pytest.mark.parametrize(("item", "field", "reason"), [
    ({"text": "x", "stance": "disagre"}, "profile[0].stance", "unknown stance 'disagre'"),
    ({"prompt": "q", "chosen": "a"}, "profile", "item 0: a past choice needs both chosen and rejected"),
    ({"text": "a", "rejected": "b", "stance": "agree"}, "profile[0]", "a past choice (with rejected) has stance"),
    ({"prompt": "q", "chosen": "a", "rejected": " "}, "profile[0].rejected", "must not be empty"),
    (7, "profile[0]", "(got int)"),
])
def test_a_bad_judgment_is_one_located_line(tmp_path: Path, item: Any, field: str, reason: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_row(0, "u0", ["fine"])) + "\n" + json.dumps(_row(1, "u1", [item])) + "\n")
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert (err.value.line, err.value.field) == (2, field) and reason in err.value.reason, str(err.value)


def test_judges_read_judgments_never_a_flattened_text() -> None:
    view = build_view(_mixed_example(), "profile", retriever=BM25, top_k=10)
    ctx = view.context()
    assert ctx.startswith(JUDGMENTS_HEADER)
    for line in ("- I cycle to work every day.", "- agreed with: Bike lanes save lives.",
                 "- disagreed with: Parking should be free.", "- disagreed with: Cars come first.",
                 "- asked: Bus or tram?\n  chose: Trams, they are quieter.\n  over: Buses, they are cheaper.",
                 "- passed on (no vote): Raise the parking fee."):
        assert line in ctx
    assert "I disagree:" not in ctx  # the verdict is read, then written as one
    # embedding / overlap scorers: only what the user stands behind; methods: everything, signed
    assert sorted(view.context_texts()) == sorted(["I cycle to work every day.", "Bike lanes save lives.",
                                                   "Trams, they are quieter."])
    assert sorted(e.sign for e in view.evidence()) == [-1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0]


def test_plain_profiles_render_exactly_as_before() -> None:
    ex = Example.model_validate(make_records(1)[0])
    view = build_view(ex, "profile", retriever=BM25, top_k=3)
    lines = view.context().splitlines()
    assert lines[0] == PROFILE_HEADER
    assert lines[1:] == [f"- [{p.category}] {p.text}" for p in view.posts]
    assert view.context_texts() == [p.text for p in view.posts]


def test_describe_covers_every_stance_word() -> None:
    from prbench.context.judgments import STANCE_SIGNS, STANCE_WORDS

    assert set(STANCE_WORDS) == set(STANCE_SIGNS)  # a new stance word gets its words for judges
    assert describe(ProfilePost(id="x", text="T", stance="downvote")) == "downvoted: T"


def test_wrong_profile_swaps_whole_judgment_sets() -> None:
    a = Example.model_validate(_row(0, "u0", MIXED))
    b = Example.model_validate(_row(1, "u1", [{"text": "Cars first.", "stance": "agree"},
                                              {"text": "Bike lanes waste money.", "stance": "agree"},
                                              {"text": "Pedestrian streets.", "stance": "disagree"}]))
    view = build_view(a, "wrong-profile", retriever=BM25, top_k=10, pool=[a, b])
    assert view.meta["donor"] == "r1" and view.user_id == "u1"
    assert sorted((e.text, e.sign) for e in view.evidence()) == sorted((e.text, e.sign) for e in post_evidence(b.profile))
    assert "disagreed with: Pedestrian streets." in view.context() and "Parking" not in view.context()


def test_judgments_round_trip_through_convert(tmp_path: Path) -> None:
    src = tmp_path / "mine.jsonl"
    src.write_text("".join(json.dumps(_row(i, f"u{i}", MIXED)) + "\n" for i in range(3)))
    items = load_examples(src)
    out = tmp_path / "out.jsonl"
    write_examples(items, out)
    assert load_examples(out) == items
    row = json.loads(out.read_text().splitlines()[0])
    assert row["profile"][4] == {"id": "p4", "category": "", "text": "Trams, they are quieter.", "stance": "chose",
                                 "prompt": "Bus or tram?", "rejected": "Buses, they are cheaper."}
    assert "rubric_aspects" in row and row["category"] == "uncategorized"


# -- every format that carries judgments -----------------------------------------------------------------
def test_personalrewardbench_context_is_a_profile_of_past_choices() -> None:
    rows = [json.loads(line) for line in (FIX / "personalrewardbench.jsonl").read_text().splitlines()]
    for split in ("test", "train"):
        for ex in load_examples(FIX / "personalrewardbench.jsonl", split=split):
            train = [r for r in rows if r["user_id"] == ex.user_id and r["split"] == "train"]
            want = {(r["chosen"]["content"], r["rejected"]["content"]) for r in train
                    if (r["chosen"]["content"], r["rejected"]["content"]) != (ex.chosen, ex.rejected)}
            assert {(p.text, p.rejected) for p in ex.profile} == want  # the judged pair never among them
            assert all(p.stance == "chose" and p.prompt for p in ex.profile)


def test_prism_profile_is_earlier_choices_only() -> None:
    for ex in load_examples(FIX / "prism", format="prism"):
        assert ex.profile, ex.id
        assert len(example_evidence(ex)) == 2 * len(ex.history)  # a pair in profile and history counts once
        by_id = {h.id: h for h in ex.history}
        for p in ex.profile:
            h = by_id[p.id]
            assert (p.text, p.rejected, p.prompt) == (h.chosen, h.rejected, h.prompt)
            assert ex.time is None or (h.time is not None and h.time < ex.time)  # never a later choice
        view = build_view(ex, "profile", retriever=BM25, top_k=2)
        assert "chose: " in view.context() and "\n  over: " in view.context()


def test_psoups_profile_is_the_stated_preference_and_other_choices() -> None:
    items = load_examples(FIX / "alpaca_gpt4_P1A_sample.json", format="psoups")
    for ex in items:
        stated, *choices = ex.profile
        assert stance_of(stated) == ("wrote", ex.persona)
        assert choices and all(p.is_choice for p in choices)
        assert (ex.chosen, ex.rejected) not in {(p.text, p.rejected) for p in choices}
        others = {(o.chosen, o.rejected) for o in items if o.id != ex.id}
        assert {(p.text, p.rejected) for p in choices} <= others


@pytest.mark.skipif(not POLIS.is_dir(), reason="../shared/data/polis-dev is not here")
def test_polis_dev_votes_read_as_judgments() -> None:
    items = load_examples(POLIS / "test.jsonl", limit=40)
    assert all(has_judgments(ex.profile) for ex in items)
    stances = {stance_of(p)[0] for ex in items for p in ex.profile}
    assert stances == {"agree", "disagree", "wrote"}
    view = build_view(items[0], "profile", retriever=BM25, top_k=30)
    assert "disagreed with: " in view.context() and "I disagree:" not in view.context()


# -- what a judge is sent --------------------------------------------------------------------------------
def _last_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def test_a_judge_is_sent_stances_and_wrong_profile_sends_anothers(fake_openai, api_key_env, tmp_path: Path) -> None:
    rows = [_row(0, "u0", [{"text": "Bike lanes save lives.", "stance": "agree"},
                           {"text": "Parking should be free.", "stance": "disagree"}]),
            _row(1, "u1", [{"text": "Cars come first.", "stance": "agree"},
                           {"prompt": "Bus or tram?", "chosen": "Buses.", "rejected": "Trams."}])]
    data = tmp_path / "votes.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    srv = fake_openai(lambda body: "Result: A")
    opts = {"base_url": srv.base_url, "api_key_env": api_key_env[0]}
    evaluate("judge:openai:fake-model", str(data), "profile", model_options=opts, n_boot=10)
    sent = {_last_user(b) for b in srv.requests}
    u0 = [p for p in sent if "Fund bike lanes on every main road (0)" in p]
    assert u0 and all("agreed with: Bike lanes save lives." in p and "disagreed with: Parking should be free." in p
                      for p in u0)
    first = len(srv.requests)
    evaluate("judge:openai:fake-model", str(data), "wrong-profile", model_options=opts, n_boot=10)
    u0 = [p for p in {_last_user(b) for b in srv.requests[first:]} if "Fund bike lanes on every main road (0)" in p]
    assert u0 and all("agreed with: Cars come first." in p and "chose: Buses.\n  over: Trams." in p
                      and "Parking" not in p for p in u0)


def test_view_evidence_keeps_to_the_character_budget() -> None:
    posts = tuple(ProfilePost(id=f"p{i}", text=f"statement number {i}", stance="disagree") for i in range(5))
    view = View("x", "q?", "profile", posts=posts, max_context_chars=len(JUDGMENTS_HEADER) + 70)
    assert 0 < view.shown_posts < 5
    assert len(view.evidence()) == view.shown_posts and view.context_texts() == []


def test_stats_count_each_verdict_of_a_judgment_profile() -> None:
    from prbench.data.stats import dataset_stats

    s = dataset_stats([_mixed_example()])
    assert s["profile_stances"] == {"agree": 1, "chose": 1, "disagree": 2, "pass": 1, "post": 1}
    assert "profile_stances" not in dataset_stats(load_examples("sample"))  # plain posts: nothing to count


def test_a_past_choice_is_retrieved_by_what_was_asked() -> None:
    posts = [ProfilePost(id="a", text="Weekend plans: hiking in the hills."),
             ProfilePost(id="b", text="Trams.", stance="chose", prompt="How should the council fund public transport?",
                         rejected="Buses.")]
    top = BM25.top_k("What public transport should the council fund?", posts, 1)
    assert [p.id for p in top] == ["b"]  # its answer alone ("Trams.") shares no word with the question
