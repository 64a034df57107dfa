"""Every data format: the fixture validates, loads its documented count, and `prbench eval -m
baseline:length` gives exactly the accuracy this file computes from the raw rows on its own.

Fixtures (tests/data/formats, see README.md there) are written by hand in each upstream
shape; the independent computations below read the raw JSON themselves (word counts of the
judged responses, ties 0.5) and use the upstream scoring rules as their repositories state
them (cited at each). TRL's implicit prompts are cut by TRL itself (trl 1.16.0,
`trl.data_utils.maybe_extract_prompt`), not by a copy.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from prbench.data import load_examples
from prbench.errors import DataError, SpecError
from prbench.formats import detect, load_reader
from prbench.testing.cli import run_cli

FIX = Path(__file__).parent / "data" / "formats"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the checkout
if not SHARED.is_dir():
    SHARED = Path("/work/shared/data")


def words(s: str) -> int:
    return len(s.split())


def credit(c: str, r: str) -> float:
    return 1.0 if words(c) > words(r) else 0.5 if words(c) == words(r) else 0.0


def rows(path: Path) -> list[dict]:
    if path.name.endswith(".gz"):
        return [json.loads(x) for x in gzip.open(path, "rt", encoding="utf-8") if x.strip()]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def eval_length(capsys, tmp_path: Path, data: Path | str, fmt: str | None, *extra: str) -> dict:
    args = ["eval", "-m", "baseline:length", "--data", str(data), "--out", str(tmp_path / "runs"), "--json",
            "--quiet", *extra]
    if fmt:
        args += ["--format", fmt]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    (summary,) = json.loads(out)
    return summary


# -- independent expectations, one per format ------------------------------------------------
def hh_pairs(path: Path) -> list[tuple[str, str]]:
    out = []
    for r in rows(path):
        c_prompt, c = r["chosen"].rsplit("\n\nAssistant:", 1)
        j_prompt, j = r["rejected"].rsplit("\n\nAssistant:", 1)
        if c_prompt == j_prompt and c.strip() and j.strip():
            out.append((c, j))
    return out


def trl_pairs(path: Path) -> list[tuple[str, str]]:
    from trl.data_utils import maybe_extract_prompt

    out = []
    for r in rows(path):
        ex = maybe_extract_prompt(r)
        c, j = ex["chosen"], ex["rejected"]
        if isinstance(c, list):
            c, j = c[-1]["content"], j[-1]["content"]
        out.append((c, j))
    return out


def rb2_expected(path: Path) -> tuple[float, dict[str, float]]:
    """allenai/reward-bench: reroll_and_score_dataset (1/number tied at the max when chosen is max)
    and process_single_model for Ties, on word-count scores."""
    by_subset: dict[str, list[float]] = defaultdict(list)
    stats = {}
    items = []
    for r in rows(path):
        cs, rs = [words(x) for x in r["chosen"]], [words(x) for x in r["rejected"]]
        if r["subset"] == "Ties":
            stats[tuple(r["id"].split(":"))] = (min(cs) - max(rs) > 0, max(cs) - min(cs) if len(cs) > 1 else None,
                                                min(cs) - max(rs))
            items.append(float(min(cs) > max(rs)))
            continue
        scores = np.array(cs + rs)
        res = (1 / np.sum(scores == scores.max())) if scores[0] == scores.max() else 0.0
        by_subset[r["subset"]].append(float(res))
        items.append(float(res))
    subsets = {s: float(np.mean(v)) for s, v in by_subset.items()}
    ref = {p: s for (k, p), s in stats.items() if k == "ref"}
    tied = {p: s for (k, p), s in stats.items() if k == "tied"}
    both = set(ref) & set(tied)
    d = np.array([tied[p][1] for p in both], dtype=float)
    ct = np.array([tied[p][2] for p in both], dtype=float)
    cr = np.array([ref[p][2] for p in both], dtype=float)
    margin = np.nan_to_num(np.tanh(np.minimum(cr, ct) / d - 1), nan=0.0)
    subsets["Ties"] = (0.3 * np.mean([s[0] for s in tied.values()]) + 0.3 * np.mean([s[0] for s in ref.values()])
                       + 0.2 * np.mean(ct > d) + 0.2 * np.mean(np.minimum(cr, ct) > d) + 0.01 * float(np.mean(margin)))
    return float(np.mean(items)), subsets


def rmbench_expected(path: Path) -> dict[str, float]:
    """THU-KEG/RM-Bench README compute_accuracy, on word-count scores, pooled over the fixture."""
    m = np.zeros((3, 3))
    data = rows(path)
    for r in data:
        for i, c in enumerate(r["chosen"]):
            for j, x in enumerate(r["rejected"]):
                m[i][j] += words(c) > words(x)
    m /= len(data)
    return {"hard": float(np.sum(np.triu(m, 1)) / 3), "normal": float(np.mean(np.diag(m))),
            "easy": float(np.sum(np.tril(m, -1)) / 3), "average": float(m.mean())}


# RewardBench v1 example counts of the fixture's subsets (allenai/reward-bench rewardbench/constants.py)
RB1_COUNTS = {"alpacaeval-easy": 100, "mt-bench-easy": 28, "llmbar-natural": 100, "llmbar-adver-neighbor": 134,
              "refusals-dangerous": 100, "xstest-should-respond": 250, "math-prm": 984, "hep-python": 164}
RB1_SECTIONS = {"Chat": ("alpacaeval-easy", "mt-bench-easy"), "Chat Hard": ("llmbar-natural", "llmbar-adver-neighbor"),
                "Safety": ("refusals-dangerous", "xstest-should-respond"), "Reasoning": ("math-prm", "hep-python")}


def rb1_expected(path: Path) -> float:
    wins = defaultdict(list)
    for r in rows(path):
        wins[r["subset"]].append(float(words(r["chosen"]) > words(r["rejected"])))  # run_rm.py: chosen > rejected
    sections = [sum(np.mean(wins[s]) * RB1_COUNTS[s] for s in subs) / sum(RB1_COUNTS[s] for s in subs)
                for subs in RB1_SECTIONS.values()]
    return float(np.mean(sections))


def prism_test_pairs(folder: Path) -> list[tuple[str, str]]:
    """Within-user split: each user's latest quarter of conversations (rounded, none for a single one)."""
    convs = rows(folder / "conversations.jsonl")
    by_user = defaultdict(list)
    for c in convs:
        by_user[c["user_id"]].append(c)
    out = []
    for items in by_user.values():
        items.sort(key=lambda c: (c["generated_datetime"], c["conversation_id"]))
        n_test = math.floor(0.25 * len(items) + 0.5) if len(items) > 1 else 0
        for c in items[len(items) - n_test:] if n_test else []:
            for turn in sorted({h["turn"] for h in c["conversation_history"]}):
                models = [h for h in c["conversation_history"] if h["turn"] == turn and h["role"] == "model"]
                best = next(h for h in models if h["if_chosen"])
                out += [(best["content"], h["content"]) for h in models if not h["if_chosen"]]
    return out


def dsp_domain_pairs(path: Path) -> list[tuple[str, str]]:
    return [(r["responses"][d], r["responses"][o]) for r in rows(path)
            for d in ("academy", "business", "entertainment", "literature")
            for o in ("academy", "business", "entertainment", "literature", "normal") if o != d]


def dsp_text_pairs(path: Path) -> list[tuple[str, str]]:
    out = []
    for r in rows(path):
        hi = 0 if r["score"][0] > r["score"][1] else 1
        c, j = r["text"][hi], r["text"][1 - hi]
        sep = "\n\n## Assistant:\n" if "## Assistant:" in c else "\n\nAssistant:"
        (cp, ca), (jp, ja) = c.rsplit(sep, 1), j.rsplit(sep, 1)
        if cp == jp and ca.strip() and ja.strip():
            out.append((ca, ja))
    return out


PAIR_CASES = {
    # name: (fixture, format, expected pairs, documented number of items)
    "hh-rlhf": ("hh-rlhf.jsonl", "hh-rlhf", lambda p: hh_pairs(p), 4),
    "trl standard explicit": ("trl-standard-explicit.jsonl", "trl", trl_pairs, 3),
    "trl standard implicit": ("trl-standard-implicit.jsonl", "trl", trl_pairs, 3),
    "trl conversational explicit": ("trl-conversational-explicit.jsonl", "trl", trl_pairs, 2),
    "trl conversational implicit": ("trl-conversational-implicit.jsonl", "trl", trl_pairs, 3),
    "rewardbench": ("rewardbench.jsonl", "rewardbench",
                    lambda p: [(r["chosen"], r["rejected"]) for r in rows(p)], 9),
    "psoups file-name dimension": ("alpaca_gpt4_P1A_sample.json", "psoups",
                                   lambda p: [(r["completion_a"], r["completion_b"]) for r in rows(p)], 3),
    "psoups dimension field": ("psoups-dimensions.jsonl", "psoups",
                               lambda p: [(r["completion_a"], r["completion_b"]) if r.get("preference", 1) == 1
                                          else (r["completion_b"], r["completion_a"]) for r in rows(p)], 2),
    "personalrewardbench": ("personalrewardbench.jsonl", "personalrewardbench",
                            lambda p: [(r["chosen"]["content"], r["rejected"]["content"]) for r in rows(p)
                                       if r["split"] == "test"], 5),
    "prism": ("prism", "prism", prism_test_pairs, 2),
    "dsp domains": ("domain_specific_preference.test.json", "dsp", dsp_domain_pairs, 32),
    "dsp text-score": ("dsp_academy_pairs.test.json", "dsp", dsp_text_pairs, 2),
    "prb (built-in sample)": ("sample", "prb", None, 63),
}


@pytest.mark.parametrize("case", sorted(PAIR_CASES))
def test_pair_format_length_accuracy(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, fmt, expected, n_items = PAIR_CASES[case]
    data = name if name == "sample" else FIX / name
    assert detect(data) == fmt
    code, out, err = run_cli(capsys, "data", "validate", str(data), "--format", fmt, "--json")
    assert code == 0 and json.loads(out)["records"] == n_items, err
    if expected is None:  # the built-in sample: prbench's own file
        from prbench.data.loaders import sample_path

        pairs = [(r["chosen"], r["rejected"]) for r in rows(sample_path())]
    else:
        pairs = expected(FIX / name)
    assert len(pairs) == n_items
    want = float(np.mean([credit(c, r) for c, r in pairs]))
    for given in (fmt, None):  # named and detected give the same run
        s = eval_length(capsys, tmp_path / str(given), data, given)
        assert s["metrics"]["n"] == n_items and s["accuracy"] == pytest.approx(want, abs=1e-12)


def test_rewardbench_section_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = eval_length(capsys, tmp_path, FIX / "rewardbench.jsonl", "rewardbench")
    fs = s["metrics"]["format_score"]
    assert fs["name"] == "RewardBench score" and set(fs["sections"]) == set(RB1_SECTIONS)
    assert fs["value"] == pytest.approx(rb1_expected(FIX / "rewardbench.jsonl"), abs=1e-12)
    assert fs["value"] != pytest.approx(s["accuracy"])  # weighting and strict wins change the number here


def test_rewardbench2_best_of_4_and_ties(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIX / "rewardbench2.jsonl"
    assert detect(path) == "rewardbench2"
    assert len(load_examples(path, None, format="rewardbench2")) == 20  # 4 x 3 + 1 x 2 + 3 x 2 pairs
    s = eval_length(capsys, tmp_path, path, "rewardbench2")
    acc, subsets = rb2_expected(path)
    assert s["metrics"]["n"] == 6 and s["metrics"]["n_total"] == 6 and s["n_total"] == 20
    assert s["accuracy"] == pytest.approx(acc, abs=1e-12)
    fs = s["metrics"]["format_score"]
    assert fs["subsets"] == pytest.approx(subsets, abs=1e-12)
    assert fs["value"] == pytest.approx(float(np.mean(list(subsets.values()))), abs=1e-12)


def test_a_response_scores_the_same_in_every_pair_of_its_item(tmp_path: Path, capsys) -> None:
    """baseline:random seeds by the view's example id: the pairs of one item share it (the item id)."""
    s = eval_length(capsys, tmp_path, FIX / "rewardbench2.jsonl", "rewardbench2")
    recs = [json.loads(x) for x in (Path(s["path"]) / "examples.jsonl").read_text().splitlines()]
    assert {r["item"] for r in recs} == {"0", "1", "2", "3", "ref:1", "tied:1"} and len(recs) == 20
    code, out, err = run_cli(capsys, "eval", "-m", "baseline:random", "--data", str(FIX / "rewardbench2.jsonl"),
                             "--out", str(tmp_path / "rnd"), "--json", "--quiet")
    assert code == 0, err
    path = Path(json.loads(out)[0]["path"])
    by_item = defaultdict(set)
    for r in map(json.loads, (path / "examples.jsonl").read_text().splitlines()):
        by_item[r["item"]].add((r["variant"].split("-")[0], r["score_chosen"]))
    assert all(len({v for k, v in pairs}) == len({k for k, _ in pairs}) for pairs in by_item.values())


def test_rmbench_easy_normal_hard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIX / "rm-bench.json"
    assert detect(path) == "rm-bench"
    s = eval_length(capsys, tmp_path, path, "rm-bench")
    want = rmbench_expected(path)
    assert s["metrics"]["n"] == 3 and s["n_total"] == 27
    assert s["accuracy"] == pytest.approx(want["average"], abs=1e-12)  # item = mean of its 9 strict wins
    fs = s["metrics"]["format_score"]
    for key in ("hard", "normal", "easy", "average"):  # prbench's pooled grid, labelled as prbench's
        assert fs["prbench_pooled"][key] == pytest.approx(want[key], abs=1e-12), key
    assert fs["hard"] < fs["easy"]  # the fixture's styled responses are longer: a length RM fails hard cells
    # one item per domain here, so RM-Bench's mean over domains equals the pool (tests/test_formats_parity.py
    # holds the fixtures where they differ)
    assert fs["value"] == pytest.approx(want["average"], abs=1e-12)


@pytest.mark.parametrize("name,fmt,n", [("lamp", "lamp", 2), ("longlamp.jsonl", "longlamp", 2),
                                        ("sample:source", "lamp-qa", 63)])
def test_source_formats(name: str, fmt: str, n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = name if name.startswith("sample") else str(FIX / name)
    items = load_examples(data, None, format=fmt)
    assert len(items) == n and all(it.question and it.profile for it in items)
    if fmt != "lamp-qa":
        assert all(it.gold_answer and not it.rubric_aspects for it in items)
        assert detect(data) == "lamp"
    code, out, err = run_cli(capsys, "data", "validate", data, "--format", fmt, "--json")
    assert code == 0 and json.loads(out)["records"] == n
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", data, "--format", fmt,
                           "--out", str(tmp_path / "r"))
    assert code == 2 and "holds source items, not benchmark items" in err


def test_lamp_gold_file_joined_by_id() -> None:
    items = {it.id: it for it in load_examples(FIX / "lamp", None, format="lamp")}
    golds = {g["id"]: g["output"] for g in json.loads((FIX / "lamp" / "dev_outputs.json").read_text())["golds"]}
    assert {k: v.gold_answer for k, v in items.items()} == golds
    assert items["310"].category == "LaMP_4" and [p.id for p in items["310"].profile] == ["3100", "3101"]


def test_multi_turn_context_is_kept_as_messages() -> None:
    ex = [e for e in load_examples(FIX / "hh-rlhf.jsonl", None) if e.context][-1]
    assert [m.role for m in ex.context] == ["user", "assistant"] and ex.question == "And three plus three?"
    conv = load_examples(FIX / "trl-conversational-explicit.jsonl", None)[1]
    assert [m.role for m in conv.context] == ["system", "user", "assistant"] and conv.question == "How are you?"
    prb = [e for e in load_examples(FIX / "personalrewardbench.jsonl", None) if e.context]
    assert prb and prb[0].context[0].content == "Hi" and prb[0].question == "Suggest a weekend hobby."


def test_formats_carry_persona_and_history() -> None:
    prism = load_examples(FIX / "prism", None)
    assert all(e.persona.startswith("About me:") and e.history for e in prism)
    assert all(h.time < e.time for e in prism for h in e.history)
    user_split = load_examples(FIX / "prism", None, format="prism:user:0.34")
    train_users = {e.user_id for e in load_examples(FIX / "prism", None, format="prism:user:0.34", split="train")}
    assert user_split and not ({e.user_id for e in user_split} & train_users)  # user-disjoint
    prb = load_examples(FIX / "personalrewardbench.jsonl", None)
    u1 = next(e for e in prb if e.user_id == "u1")
    assert len(u1.history) == 2 and u1.flip is False  # the two train rows; `flip` kept as given
    dsp = load_examples(FIX / "domain_specific_preference.test.json", None, format="dsp:academy")
    assert len(dsp) == 8 and {e.user_id for e in dsp} == {"academy"} and dsp[0].persona


# -- located one-line errors ------------------------------------------------------------------
BAD = {
    "rewardbench2 wrong num_correct": ("rewardbench2", {"id": "0", "prompt": "p", "chosen": ["a"], "rejected": ["b"],
                                                        "subset": "Math", "num_correct": 2}, "num_correct"),
    "rm-bench two variants": ("rm-bench", {"id": "x", "prompt": "p", "chosen": ["a", "b"], "rejected": ["c", "d", "e"],
                                           "domain": "chat"}, "chosen"),
    "hh differing transcripts": ("hh-rlhf", {"chosen": "\n\nHuman: a\n\nAssistant: b",
                                             "rejected": "\n\nHuman: other\n\nAssistant: c"}, "rejected"),
    "prb-pairs unknown split": ("personalrewardbench", {"user_id": "u", "split": "dev", "context": [
        {"role": "user", "content": "q"}], "chosen": {"role": "assistant", "content": "a"},
        "rejected": {"role": "assistant", "content": "b"}}, "split"),
    "trl prompt not ending with user": ("trl", {"prompt": [{"role": "assistant", "content": "x"}],
                                                "chosen": [{"role": "assistant", "content": "a"}],
                                                "rejected": [{"role": "assistant", "content": "b"}]}, "prompt"),
    "psoups bad preference": ("psoups", {"user_input": "q", "completion_a": "a", "completion_b": "b",
                                         "dimension": "P1A", "preference": 3}, "preference"),
    "dsp missing domain": ("dsp", {"query": "q", "responses": {"academy": "a"}}, "responses.business"),
    "judgebench tie label": ("judgebench", {"pair_id": "p", "source": "livecodebench", "question": "q",
                                            "response_A": "a", "response_B": "b", "label": "A=B"}, "label"),
    "rmb empty reject": ("rmb", {"pair_uid": "1", "conversation_input": [{"role": "user", "content": "q"}],
                                 "chosen": {"llm_name": "m", "answer": "a"}, "reject": {"llm_name": "n", "answer": ""},
                                 "category_path": "Pairwise_set/Harmlessness/S5"}, "reject.answer"),
    "dsp infinite score": ("dsp", {"text": ["\n\nHuman: q\n\nAssistant: a", "\n\nHuman: q\n\nAssistant: b"],
                                   "score": [1.0, float("inf")]}, "score[1]"),
    "rewardbench blank chosen": ("rewardbench", {"id": 1, "prompt": "p", "chosen": " ", "rejected": "r",
                                                 "subset": "math-prm"}, "chosen"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_located_one_line_errors(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fmt, bad, field = BAD[case]
    path = tmp_path / "data.jsonl"
    good_first = {"rewardbench2": {"id": "9", "prompt": "p", "chosen": ["a"], "rejected": ["b"], "subset": "Math"}}
    lines = [json.dumps(good_first[fmt])] if fmt in good_first else []
    path.write_text("\n".join([*lines, json.dumps(bad)]) + "\n")
    with pytest.raises(DataError) as err:
        load_examples(path, None, format=fmt)
    assert err.value.file == str(path) and err.value.line == len(lines) + 1 and err.value.field == field
    code, _, stderr = run_cli(capsys, "data", "validate", str(path), "--format", fmt)
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith(f"error: {path}:{len(lines) + 1}: {field}:")


def test_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(SpecError, match="did you mean 'rewardbench'"):
        load_reader("rewardbench3")
    with pytest.raises(SpecError, match="unknown split mode"):
        load_reader("prism:random")


def test_a_plugin_format_through_the_registry(tmp_path: Path) -> None:
    """A third-party reader registered by name (what the `prbench.formats` entry point does)."""
    from prbench.formats.base import Reader, build, rows, text
    from prbench.registry import FORMATS
    from prbench.schema import Example

    class TSVish(Reader):
        name, priority = "qa-pairs", 5

        @classmethod
        def matches(cls, row):
            return "q" in row and "good" in row

        def read(self, src, split="test"):
            for file, line, row in rows(src, split):
                yield file, line, build(Example, file, line, id=str(line), question=text(row, "q", file, line),
                                        chosen=text(row, "good", file, line), rejected=text(row, "bad", file, line),
                                        category="x", profile=[], rubric_aspects=[])

    path = tmp_path / "p.jsonl"
    path.write_text('{"q": "a?", "good": "yes indeed", "bad": "no"}\n')
    FORMATS.register("qa-pairs", TSVish)
    try:
        assert detect(path) == "qa-pairs"
        (ex,) = load_examples(path, None)
        assert ex.chosen == "yes indeed"
    finally:
        FORMATS.unregister("qa-pairs")


# -- the real public files in ../shared/data, when that folder is there ---------------------------
REAL = [p for p in (SHARED / "hh-rlhf" / "harmless-base" / "test.jsonl.gz", SHARED / "dsp" / "helpful.test.json")
        if p.is_file()]


@pytest.mark.parametrize("path", [*REAL, FIX.parent.parent.parent / "src" / "prbench" / "data" / "sample_formats" /
                                  "hh-rlhf-harmless-test-sample.jsonl"], ids=lambda p: p.name)
def test_real_files(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Readers on the real public files (and the shipped sample derived from HH-RLHF, MIT)."""
    fmt = "hh-rlhf" if "hh-rlhf" in path.name or "harmless" in str(path) else "dsp"
    assert detect(path) == fmt
    pairs = hh_pairs(path) if fmt == "hh-rlhf" else dsp_text_pairs(path)
    n_rows = len(rows(path))
    if n_rows > len(pairs):  # the real splits hold a few malformed pairs: strict by default, counted under :skip
        with pytest.raises(DataError, match="':skip' leaves such rows out"):
            load_examples(path, None, format=fmt)
        with pytest.warns(UserWarning, match=f"left out {n_rows - len(pairs)} malformed"):
            s = eval_length(capsys, tmp_path, path, f"{fmt}:skip")
    else:
        s = eval_length(capsys, tmp_path, path, fmt)
    assert s["metrics"]["n"] == len(pairs)
    assert s["accuracy"] == pytest.approx(float(np.mean([credit(c, r) for c, r in pairs])), abs=1e-12)


def test_convert_to_prbench_jsonl_and_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Any format converts to prbench JSONL; read back with --format prb it scores the same."""
    for name, fmt in (("rewardbench2.jsonl", "rewardbench2"), ("hh-rlhf.jsonl", "hh-rlhf"), ("prism", "prism")):
        dst = tmp_path / f"{fmt}.jsonl"
        code, _, err = run_cli(capsys, "data", "convert", str(FIX / name), str(dst), "--format", fmt)
        assert code == 0, err
        original, back = load_examples(FIX / name, None, format=fmt), load_examples(dst, format="prb")
        assert back == original  # context, history, persona, item rules survive the round trip
        a = eval_length(capsys, tmp_path / f"a-{fmt}", FIX / name, fmt)
        b = eval_length(capsys, tmp_path / f"b-{fmt}", dst, "prb")
        assert a["metrics"]["n"] == b["metrics"]["n"] and a["accuracy"] == b["accuracy"]
    plain = tmp_path / "plain.jsonl"
    assert run_cli(capsys, "data", "convert", "sample", str(plain))[0] == 0
    from prbench.data.loaders import sample_path

    # today's files convert to the same records with no new keys (empty context/history/persona stay absent)
    assert rows(plain) == rows(sample_path())


def test_training_pairs_and_stats_from_other_formats(capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.data.pairs import load_pairs

    pairs = load_pairs(FIX / "prism", format="prism", split="train")
    assert len(pairs) == 8 and {p.user_id for p in pairs} == {"user0", "user1", "user2"}
    assert len(load_pairs(FIX / "rm-bench.json")) == 27  # detected; every expanded pair is a training pair
    code, out, _ = run_cli(capsys, "data", "stats", str(FIX / "rewardbench2.jsonl"), "--json")
    stats = json.loads(out)
    assert code == 0 and stats["multi_response_items"] == 6 and stats["rules"] == {"best-of-n": 12, "ties": 8}
    code, out, _ = run_cli(capsys, "data", "stats", str(FIX / "personalrewardbench.jsonl"), "--json")
    assert json.loads(out)["context_turns"]["max"] == 2.0 and "history_pairs" in json.loads(out)
    assert detect("sample:hh-rlhf") == "hh-rlhf" and len(load_examples("sample:hh-rlhf")) == 24


def test_limit_counts_items_and_never_cuts_one(tmp_path: Path) -> None:
    from prbench import evaluate

    path = FIX / "rewardbench2.jsonl"
    assert [e.item_id for e in load_examples(path, None, limit=2)] == ["0"] * 3 + ["1"] * 3
    shuffled = load_examples(path, None, limit=3, shuffle_seed=1)
    assert len({e.item_id for e in shuffled}) == 3
    assert all(sum(e.item_id == k for e in shuffled) == (6 if k == "tied:1" else 2 if k == "ref:1" else 3)
               for k in {e.item_id for e in shuffled})
    res = evaluate("baseline:length", str(path), "none", limit=5, format="rewardbench2")
    assert res.summary.metrics.n == 5 and res.summary.n_total == 14  # 4 x 3 pairs + ref:1's 2
    assert len(load_examples("sample", limit=7)) == 7 and load_examples("sample", limit=5, shuffle_seed=3) == \
        load_examples("sample", shuffle_seed=3)[:5]
