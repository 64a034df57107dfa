"""The `history` and `persona` conditions and their wrong-user controls; multi-turn context.

Leakage, as tests/test_evaluate.py::test_no_leakage_of_narrative_or_rubric checks it for the
paper's conditions, extended to the new fields: whatever a reward model is given (the text of
every view, the dialogue before the response) never holds the narrative, the rubric (outside
`oracle`), the judged pair inside its own history, or a pair later than the judged one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench import evaluate
from prbench.context.conditions import (
    ALL_CONDITIONS,
    HISTORY_CONDITIONS,
    build_view,
    eligible_history,
    no_context_failure,
)
from prbench.context.retrieval import BM25Retriever
from prbench.data import load_examples
from prbench.errors import PrbenchError
from prbench.rewards import PointwiseRM, Score
from prbench.schema import Example, HistoryPair
from prbench.testing.records import make_records

FIX = Path(__file__).parent / "data" / "formats"
NARRATIVE_MARK, RUBRIC_MARK, EVIDENCE_MARK = "zqnarrativesecret", "zqrubricsecret", "zqevidencesecret"


class Recorder(PointwiseRM):
    """Everything it is asked to score, as the RM would see it: earlier turns, user turn, response."""

    spec = "recorder"

    def __init__(self) -> None:
        self.views: list = []
        self.seen: list[str] = []

    def score(self, batch):
        for v, r in batch:
            self.views.append(v)
            self.seen.append(json.dumps(v.messages()) + "\n---\n" + r)
        return [Score(float(len(r))) for _, r in batch]


def _user_context(view) -> str:
    """What the view shows about the user (not the judged responses the RM is handed beside it)."""
    return json.dumps(view.messages())


@pytest.mark.parametrize("data", ["personalrewardbench.jsonl", "prism"])
def test_history_never_shows_the_judged_pair_or_a_later_one(data: str) -> None:
    items = load_examples(FIX / data, None)
    rec = Recorder()
    res = evaluate(rec, items, "history", top_k=3)
    by_id = {ex.id: ex for ex in items}
    assert any(v.pairs for v in rec.views)  # the condition does show history
    for v in rec.views:
        ex = by_id[v.example_id]
        assert v.user_id == ex.user_id and len(v.pairs) <= 3
        assert all(h.id != ex.id for h in v.pairs)
        assert all((h.prompt, h.chosen, h.rejected) != (ex.question, ex.chosen, ex.rejected) for h in v.pairs)
        if ex.time is not None:
            assert all(h.time is not None and h.time < ex.time for h in v.pairs)
        ctx = _user_context(v)
        assert "Earlier choices of this user" in ctx if v.pairs else True
        assert ex.chosen not in ctx.replace(json.dumps(ex.question)[1:-1], "")  # the judged answer is never shown
    assert {r.history_shown for r in res.records if getattr(r, "history_shown", None) is not None} <= {1, 2, 3}


def test_reader_copies_of_the_judged_pair_and_future_pairs_are_dropped() -> None:
    ex = Example(id="x1", question="What to cook?", chosen="Curry.", rejected="Toast.", category="c", profile=[],
                 rubric_aspects=[], user_id="u", time="2024-01-02", item_id="item-1",
                 history=[HistoryPair(id="x1", prompt="a", chosen="b", rejected="c", time="2024-01-01"),  # same id
                          HistoryPair(id="h-same", prompt="What to cook?", chosen="Curry.", rejected="Toast.",
                                      time="2024-01-01"),  # same texts
                          HistoryPair(id="item-1", prompt="d", chosen="e", rejected="f", time="2024-01-01"),  # its item
                          HistoryPair(id="h-later", prompt="What to cook later?", chosen="g", rejected="h",
                                      time="2024-01-03"),
                          HistoryPair(id="h-same-time", prompt="i", chosen="j", rejected="k", time="2024-01-02"),
                          HistoryPair(id="h-untimed", prompt="l", chosen="m", rejected="n"),
                          HistoryPair(id="h-ok", prompt="What to cook for guests?", chosen="Stew.", rejected="Chips.",
                                      time="2023-12-31")])
    assert [h.id for h in eligible_history(ex, ex.history)] == ["h-ok"]
    view = build_view(ex, "history", retriever=BM25Retriever())
    assert [p.id for p in view.pairs] == ["h-ok"] and "Stew." in view.prompt() and "Curry." not in view.prompt()
    untimed = ex.model_copy(update={"time": None})
    assert {h.id for h in eligible_history(untimed, ex.history)} == {"h-later", "h-same-time", "h-untimed", "h-ok"}


def test_history_is_ranked_by_relevance_and_cut_to_k() -> None:
    hist = [HistoryPair(id=f"h{i}", prompt=p, chosen="yes", rejected="no")
            for i, p in enumerate(["best pasta recipe", "fix a bike tyre", "pasta sauce with tomato", "learn piano"])]
    ex = Example(id="q", question="a quick pasta dinner", chosen="c", rejected="r", category="c", profile=[],
                 rubric_aspects=[], user_id="u", history=hist)
    view = build_view(ex, "history", retriever=BM25Retriever(), top_k=2)
    assert {p.id for p in view.pairs} == {"h0", "h2"}
    short = build_view(ex, "history", retriever=BM25Retriever(), top_k=2, max_context_chars=120)
    assert short.shown_posts == 1 and short.prompt().count("- Asked:") == 1  # least relevant dropped first


def test_persona_and_the_wrong_user_controls() -> None:
    items = load_examples(FIX / "prism", None, format="prism", split="train")
    personas = {ex.user_id: ex.persona for ex in items}
    for ex in items:
        own = build_view(ex, "persona", retriever=BM25Retriever())
        assert own.persona == ex.persona and ex.persona in own.prompt() and own.user_id == ex.user_id
        wrong = build_view(ex, "wrong-persona", retriever=BM25Retriever(), pool=items, seed=1)
        assert wrong.user_id != ex.user_id and wrong.persona == personas[wrong.user_id]
        assert ex.persona not in wrong.prompt()
        again = build_view(ex, "wrong-persona", retriever=BM25Retriever(), pool=list(reversed(items)), seed=1)
        assert again.meta["donor"] == wrong.meta["donor"]  # seeded by (seed, example id), not by pool order
    test = load_examples(FIX / "prism", None)
    for ex in test:
        wrong = build_view(ex, "wrong-history", retriever=BM25Retriever(), pool=test, seed=0)
        assert wrong.user_id != ex.user_id
        assert all(h.id not in {p.id for p in ex.history} for h in wrong.pairs)


def test_persona_refuses_a_format_without_one() -> None:
    (ex, *_) = load_examples(FIX / "hh-rlhf.jsonl", None)
    view = build_view(ex, "persona", retriever=BM25Retriever())  # a record without: no context, scored as none
    assert view.units == 0 and view.prompt() == ex.question
    # a run where no record had one fails with one line (tests/test_integrity_round2.py runs it)
    assert "stated preferences or a self-description" in no_context_failure("persona", 3, 3)
    assert no_context_failure("persona", 2, 3) is None
    with pytest.raises(PrbenchError, match="wrong-history: no other user's history"):
        build_view(ex, "wrong-history", retriever=BM25Retriever(), pool=[ex])


def test_no_leakage_under_any_condition(tmp_path: Path) -> None:
    """Narrative and evidence never, rubric only under oracle: now with history and persona fields present."""
    recs = make_records(8)
    for i, r in enumerate(recs):
        r["narrative"] += f" {NARRATIVE_MARK} {EVIDENCE_MARK}"
        r["rubric_aspects"][0]["aspect"] += f" {RUBRIC_MARK}"
        r["rubric_aspects"][0]["evidence"] = EVIDENCE_MARK
        r["persona"] = f"I am user {r.get('user_id') or r['id']} and like short answers."
        r["history"] = [{"id": f"{r['id']}-h", "prompt": f"earlier question {i}", "chosen": "good", "rejected": "bad"}]
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    planner = tmp_path / "planner.jsonl"
    planner.write_text("".join(json.dumps({"id": r["id"], "aspects": [{"aspect": "Guessed", "reason": "r"}]}) + "\n"
                               for r in recs), encoding="utf-8")
    for cond in ALL_CONDITIONS:
        rec = Recorder()
        evaluate(rec, str(path), cond, planner_file=str(planner))
        text = "\n".join(rec.seen)
        assert NARRATIVE_MARK not in text and EVIDENCE_MARK not in text, cond
        assert (RUBRIC_MARK in text) == (cond == "oracle"), cond
        assert ("Earlier choices of this user" in text) == (cond in ("history", "wrong-history")), cond
        assert ("like short answers" in text) == (cond in ("persona", "wrong-persona")), cond
    assert set(HISTORY_CONDITIONS) <= set(ALL_CONDITIONS)


def test_cli_eval_history_and_persona(tmp_path: Path) -> None:
    """`prbench eval -c history,persona,wrong-persona` on the PRISM tables through the real CLI."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "prbench", "eval", "-m", "baseline:length", "--data", str(FIX / "prism"),
                          "--format", "prism", "-c", "history,persona,wrong-persona", "--out", str(tmp_path / "runs"),
                          "--json", "--quiet"], capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    summaries = json.loads(out.stdout)
    assert [s["condition"] for s in summaries] == ["history", "persona", "wrong-persona"]
    assert len({s["accuracy"] for s in summaries}) == 1  # the length baseline ignores context: same accuracy
    donors = [json.loads(x) for x in (Path(summaries[2]["path"]) / "examples.jsonl").read_text().splitlines()]
    assert all("donor" in r for r in donors)


def test_multi_turn_reaches_the_chat_template_as_messages(tmp_path: Path) -> None:
    """A classifier RM gets the dialogue as chat messages (one templating step), not one flattened turn."""
    from transformers import AutoTokenizer

    from prbench.rewards.classifier import SequenceClassifierRM
    from prbench.testing.tiny import make_tiny_seq_classifier

    rm_dir = make_tiny_seq_classifier(tmp_path / "rm", seed=2)
    items = [e for e in load_examples(FIX / "hh-rlhf.jsonl", None) if e.context]
    rm = SequenceClassifierRM(str(rm_dir), device="cpu")
    tok = AutoTokenizer.from_pretrained(rm_dir)
    for ex in items:
        view = build_view(ex, "none", retriever=BM25Retriever())
        msgs = [*[{"role": m.role, "content": m.content} for m in ex.context], {"role": "user", "content": ex.question},
                {"role": "assistant", "content": ex.chosen}]
        want = list(tok.apply_chat_template(msgs, tokenize=True, return_dict=False))
        ids, truncated, _ = rm.fit(view, ex.chosen)
        assert ids == want and not truncated
        flat = rm.encode(view.prompt(), ex.chosen)
        assert flat != want  # the old single-turn path would have lost the turns
    res = evaluate(rm, items, "none")
    assert res.summary.metrics.n == len(items) and res.summary.metrics.n_invalid == 0
