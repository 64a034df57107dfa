"""Parity with each benchmark's own scoring code: one test per row of docs/formats.md's parity table.

Every fixture (tests/data/formats/parity) is written by hand in the upstream's exact record shape;
responses are runs of the words "alpha bravo ...", so `baseline:length` scores each response by
its word count, written below as numbers. The expected numbers are worked out by hand from the
upstream rule, cited with file, lines and commit; the derivation sits beside each number.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prbench.data import load_examples
from prbench.errors import DataError
from prbench.formats import detect, format_score
from prbench.stats import metrics
from prbench.testing.cli import run_cli

PAR = Path(__file__).parent / "data" / "formats" / "parity"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/data")


def eval_length(capsys, tmp_path: Path, data: Path, fmt: str | None = None) -> dict:
    args = ["eval", "-m", "baseline:length", "--data", str(data), "--out", str(tmp_path / "runs"), "--json", "--quiet"]
    code, out, err = run_cli(capsys, *args, *(["--format", fmt] if fmt else []))
    assert code == 0, err
    (summary,) = json.loads(out)
    return summary


# -- RM-Bench: THU-KEG/RM-Bench@73c52d7 scripts/utils.py split_dataset_by_domain (L34-45), compute_accuracy
#    (L48-112). Per domain (prefix chat/math/code/safety) acc_matrix[i][j] = share of items with
#    chosen[i] > rejected[j] strictly; hard = sum(upper right)/3, normal = mean(diagonal), easy = sum(lower
#    left)/3; domain average = mean(hard, normal, easy); reported hard/normal/easy = means over domains,
#    total_avg_acc = mean of the domain averages.
def test_rmbench_total_dataset_domains_merged_by_prefix(tmp_path: Path, capsys) -> None:
    """Word counts (chosen | rejected), the win matrix (rows chosen style i, columns rejected style j):
    chat/1 (2,4,6 | 1,3,5): [[1,0,0],[1,1,0],[1,1,1]]     chat/2 (3,3,3 | 3,3,3): all ties, all 0
      chat = mean of the two: hard 0, normal 1/2, easy 1/2, average 1/3
    math/1 (5,5,5 | 1,1,1): all 1: hard 1, normal 1, easy 1, average 1
    code/1 (1,2,3 | 2,3,4): [[0,0,0],[0,0,0],[1,0,0]]: hard 0, normal 0, easy 1/3, average 1/9
    safety-refuse/1 (4,4,4 | 2,5,6): [[1,0,0],[1,0,0],[1,0,0]]
    safety-response/1 (6,6,6 | 1,2,7): [[1,1,0],[1,1,0],[1,1,0]]
      safety (both merged by prefix) = [[1,.5,0],[1,.5,0],[1,.5,0]]: hard 1/6, normal 1/2, easy 5/6, average 1/2
    hard = (0 + 1 + 0 + 1/6)/4 = 7/24; normal = (1/2 + 1 + 0 + 1/2)/4 = 1/2; easy = (1/2 + 1 + 1/3 + 5/6)/4 = 2/3
    score = (1/3 + 1 + 1/9 + 1/2)/4 = 35/72.
    prbench's pooled accuracy: item shares 6/9, 0, 9/9, 1/9, 3/9, 6/9 -> 25/54 (reported beside, as prbench's)."""
    path = PAR / "rm-bench-total_dataset.json"
    assert detect(path) == "rm-bench"
    s = eval_length(capsys, tmp_path, path, "rm-bench")
    fs = s["metrics"]["format_score"]
    assert fs["hard"] == pytest.approx(7 / 24, abs=1e-12)
    assert fs["normal"] == pytest.approx(1 / 2, abs=1e-12)
    assert fs["easy"] == pytest.approx(2 / 3, abs=1e-12)
    assert fs["value"] == pytest.approx(35 / 72, abs=1e-12)
    assert set(fs["domains"]) == {"chat", "math", "code", "safety"} and fs["domains"]["safety"]["n"] == 2
    assert fs["domains"]["code"]["average"] == pytest.approx(1 / 9, abs=1e-12)
    assert s["accuracy"] == pytest.approx(25 / 54, abs=1e-12) and fs["prbench_pooled"]["average"] == pytest.approx(
        25 / 54, abs=1e-12)
    assert fs["accuracy_is"].startswith("prbench's")  # the pooled number is labelled as prbench's, beside RM-Bench's
    # strict_accuracy counts pairs (cells) won strictly, per its definition: chat/1 won 6 of 9 and counts 6/9
    assert s["metrics"]["strict_accuracy"] == pytest.approx(25 / 54, abs=1e-12)


def test_rmbench_per_domain_file_without_domain(tmp_path: Path, capsys) -> None:
    """data/chat_filtered.json shape (id, subset, prompt, chosen[3], rejected[3], error_key, error; no domain):
    detected as rm-bench (three chosen, three rejected, no num_correct); domain from the file name, since its
    subset 'alpacaeval' names none. Upstream scores such a file with compute_accuracy directly:
    id 8 (2,4,6 | 1,3,5): [[1,0,0],[1,1,0],[1,1,1]]; id 9 (3,1,1 | 2,2,2): [[1,1,1],[0,0,0],[0,0,0]]
    acc_matrix = [[1,.5,.5],[.5,.5,0],[.5,.5,.5]]: hard = (.5+.5+0)/3 = 1/3, normal = (1+.5+.5)/3 = 2/3,
    easy = (.5+.5+.5)/3 = 1/2; the one domain's average (the score) = (1/3 + 2/3 + 1/2)/3 = 1/2."""
    path = PAR / "rm-bench-per-domain" / "chat_filtered.json"
    assert detect(path) == "rm-bench"
    assert {e.category for e in load_examples(path, None)} == {"chat"}
    s = eval_length(capsys, tmp_path, path)  # detected, no --format
    fs = s["metrics"]["format_score"]
    for key, want in (("hard", 1 / 3), ("normal", 2 / 3), ("easy", 1 / 2), ("value", 1 / 2)):
        assert fs[key] == pytest.approx(want, abs=1e-12), key
    assert fs["absent_domains"] == ["math", "code", "safety"]


def test_rmbench_folder_of_per_domain_files_is_the_whole_benchmark(tmp_path: Path, capsys) -> None:
    """The folder adds code_filtered.json (id 8 again, as RM-Bench's chat and code ids overlap; domain from the
    file name): code 8 (1,2,3 | 2,3,4): [[0,0,0],[0,0,0],[1,0,0]]: hard 0, normal 0, easy 1/3, average 1/9.
    With chat above (1/3, 2/3, 1/2, average 1/2): hard = (1/3 + 0)/2 = 1/6, normal = (2/3 + 0)/2 = 1/3,
    easy = (1/2 + 1/3)/2 = 5/12, score = (1/2 + 1/9)/2 = 11/36."""
    s = eval_length(capsys, tmp_path, PAR / "rm-bench-per-domain")
    fs = s["metrics"]["format_score"]
    for key, want in (("hard", 1 / 6), ("normal", 1 / 3), ("easy", 5 / 12), ("value", 11 / 36)):
        assert fs[key] == pytest.approx(want, abs=1e-12), key
    assert s["metrics"]["n"] == 3


def test_rmbench_row_without_any_domain_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    row = json.loads((PAR / "rm-bench-per-domain" / "chat_filtered.json").read_text())[0]
    path.write_text(json.dumps([row]))
    with pytest.raises(DataError) as err:
        load_examples(path, None, format="rm-bench")
    assert (err.value.line, err.value.field) == (1, "domain") and "chat_filtered.json" in err.value.reason


# -- RewardBench v1: allenai/reward-bench@05a9005 scripts/run_rm.py L265 (1 if chosen > rejected), L356-362
#    (per-subset accuracy), rewardbench/utils.py calculate_scores_per_section L75-91 (EXAMPLE_COUNTS weights,
#    constants.py L42-66; SUBSET_MAPPING L68-100; a section with no subset present scores 0; subsets outside
#    the mapping never enter), score = mean of the four sections.
def test_rewardbench_v1_absent_section_and_unmapped_subset(tmp_path: Path, capsys) -> None:
    """Word counts chosen > rejected per row (strict: a tie is 0):
    alpacaeval-easy: 3>1 (1), 2=2 (0) -> 1/2;  mt-bench-easy: 1<2 -> 0
      Chat = (1/2*100 + 0*28)/128 = 25/64
    llmbar-natural: 4>2, 3>1 -> 1;  Chat Hard = 1
    Safety: no subset here -> 0
    math-prm: 2>1 (1), 1<3 (0) -> 1/2;  hep-python: 5>2 -> 1;  Reasoning = (1/2*984 + 1*164)/1148 = 4/7
    anthropic_helpful (2>1): outside SUBSET_MAPPING, ignored
    score = (25/64 + 1 + 0 + 4/7)/4 = 879/1792.
    prbench's accuracy (ties 0.5, every row): (1 + .5 + 0 + 1 + 1 + 1 + 0 + 1 + 1)/9 = 6.5/9."""
    path = PAR / "rewardbench-no-safety.jsonl"
    with pytest.warns(UserWarning, match=r"Safety have no subset here and score 0.*anthropic_helpful are outside"):
        s = eval_length(capsys, tmp_path, path, "rewardbench")
    fs = s["metrics"]["format_score"]
    assert fs["sections"] == pytest.approx({"Chat": 25 / 64, "Chat Hard": 1.0, "Safety": 0.0, "Reasoning": 4 / 7},
                                           abs=1e-12)
    assert fs["value"] == pytest.approx(879 / 1792, abs=1e-12)
    assert fs["absent_sections"] == ["Safety"] and fs["unmapped_subsets"] == ["anthropic_helpful"]
    assert s["accuracy"] == pytest.approx(6.5 / 9, abs=1e-12)


# -- RewardBench 2 (re-checked): allenai/reward-bench@05a9005 rewardbench/utils.py reroll_and_score_dataset
#    (L545-591: 1/np.sum(scores == max) when scores[0] is the max, else 0), _compute_prompt_stats (L1010-1031)
#    and process_single_model (L1033-1100), scripts/run_v2.py L356-378 (per subset); score = mean over subsets.
def test_rewardbench2_hand_worked(tmp_path: Path, capsys) -> None:
    """tests/data/formats/rewardbench2.jsonl, word counts chosen | rejected:
    0 Factuality 4 | 1,6,5 -> 0;  1 Factuality 7 | 6,1,1 -> 1;  Factuality = 1/2
    2 Precise IF 2 | 2,4,1 -> 0 (4 is the max);  Precise IF = 0
    3 Math 8 | 3,8,1 -> two at the max -> 1/2;  Math = 1/2
    Ties: ref:1 correct [3], incorrect [6,1]: accurate False, margin 3-6 = -3
          tied:1 correct [5,4,4], incorrect [1,3]: accurate True, spread 5-4 = 1, margin 4-3 = 1
      = 0.30*1 (tied) + 0.30*0 (ref) + 0.20*(1 > 1) + 0.20*(min(-3,1) > 1) + 0.01*tanh(min(-3,1)/1 - 1)
      = 0.3 + 0.01*tanh(-4)
    score = (1/2 + 0 + 1/2 + 0.3 + 0.01*tanh(-4))/4
    prbench's accuracy: items 0, 1, 0, 1/2, ref:1 0, tied:1 1 (every chosen beats every rejected) -> 5/12."""
    import math

    s = eval_length(capsys, tmp_path, Path(__file__).parent / "data" / "formats" / "rewardbench2.jsonl")
    fs = s["metrics"]["format_score"]
    ties = 0.3 + 0.01 * math.tanh(-4)
    assert fs["subsets"] == pytest.approx({"Factuality": 0.5, "Precise IF": 0.0, "Math": 0.5, "Ties": ties},
                                          abs=1e-12)
    assert fs["value"] == pytest.approx((1.3 + 0.01 * math.tanh(-4)) / 4, abs=1e-12)
    assert s["accuracy"] == pytest.approx(5 / 12, abs=1e-12)


# -- DSP: Linear95/DSP@ec099cf trainer.py compute_metrics (L17-36): every ordered pair of responses whose
#    label scores differ counts (score_mask_larger + score_mask_smaller); a prediction is right when
#    logits_diff > 0 matches score_mask_larger, so an RM score tie is right in one orientation of two (0.5);
#    equal label scores never count.
def test_dsp_label_ties_left_out_and_counted(tmp_path: Path, capsys) -> None:
    """Rows (label scores; word counts of the final answers):
    1: [1, 0], chosen text[0] 3 words vs 1 -> 2 of 2 orientations -> 1
    2: [1, 1] label tie -> left out;  4: [0, 0] label tie -> left out
    3: [0.5, 1.5], chosen text[1] 2 words vs 2 -> RM tie, 1 of 2 -> 1/2
    5: [0, 1], chosen text[1] 1 word vs 4 -> 0 of 2 -> 0
    Preference total Acc = (2 + 1 + 0)/6 = 1/2 over 3 pairs."""
    path = PAR / "dsp-label-ties.test.json"
    assert detect(path) == "dsp"
    with pytest.warns(UserWarning, match=r"left out 2 row\(s\) with equal label scores .*dsp-label-ties.test.json:2"):
        s = eval_length(capsys, tmp_path, path, "dsp")
    assert s["metrics"]["n"] == 3 and s["accuracy"] == pytest.approx(1 / 2, abs=1e-12)


def test_dsp_nan_score_is_a_located_error(tmp_path: Path, capsys) -> None:
    """Row 3's score is [1.0, NaN]: a NaN compares false both ways and would silently make text[1] chosen."""
    path = PAR / "dsp-nan.test.json"
    with pytest.raises(DataError) as err:
        load_examples(path, None, format="dsp")
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 3, "score[1]")
    code, _, stderr = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(path), "--out",
                              str(tmp_path / "r"))
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith(f"error: {path}:3: score[1]: must be a finite number (got nan)")


# -- JudgeBench: ScalerLab/JudgeBench@e2c52c2 utils/metrics.py compute_final_metrics (L14-78): per pair, each
#    of the two decisions counts +1 when it equals the label, -1 when it equals the flipped label, 0 else;
#    correct when the sum > 0; accuracy = correct / pairs. Reward-model judges decide 'A>B' if score_A >
#    score_B else 'B>A' (utils/judges.py L473, L525, L564).
def test_judgebench_both_orders_consistency_rule(tmp_path: Path, capsys) -> None:
    """Word counts A | B, label:
    p1 3 | 1, A>B: game 1 A>B (+1), game 2 (B,A) gives B>A, flipped A>B (+1) -> +2 correct
    p2 2 | 2, B>A: game 1 tie -> 'B>A' (+1), game 2 tie -> 'B>A' flipped 'A>B' (-1) -> 0, not correct
    p3 1 | 4, A>B: both games B>A -> -2, not correct
    p4 1 | 5, B>A: both games B>A -> +2 correct
    p5 2 | 2, A>B: game 1 'B>A' (-1), game 2 flipped 'A>B' (+1) -> 0, not correct
    accuracy = 2/5 (a score tie is wrong: prbench's pair rule would give 3/5); per run_judge.py's source
    groups: mmlu-pro (p1, p5) 1/2, livebench-reasoning 0, livebench-math 0, livecodebench 1."""
    path = PAR / "judgebench.jsonl"
    assert detect(path) == "judgebench"
    s = eval_length(capsys, tmp_path, path)
    fs = s["metrics"]["format_score"]
    assert s["accuracy"] == fs["value"] == pytest.approx(2 / 5, abs=1e-12) and s["metrics"]["n"] == 5
    assert fs["accuracy_is"].startswith("the benchmark's")
    assert fs["groups"] == pytest.approx({"mmlu-pro": 0.5, "livebench-reasoning": 0.0, "livebench-math": 0.0,
                                          "livecodebench": 1.0}, abs=1e-12)


@pytest.mark.parametrize("sides,want", [(["chosen", "chosen"], 1.0), (["chosen", "tie"], 1.0),
                                        (["chosen", "rejected"], 0.0), (["tie", "tie"], 0.0),
                                        (["rejected", "tie"], 0.0), (["chosen"], 1.0), (["tie"], 0.0)])
def test_strict_rule_on_a_judges_verdicts_is_judgebenchs_counter(sides: list[str], want: float) -> None:
    """compute_final_metrics L65-76: +1 per decision for the label, -1 against, correct when the sum > 0."""
    rec = {"id": "p", "item": "p", "rule": "strict", "category": "x", "sides": sides, "credit": 0.5}
    assert metrics.item_credit("strict", [rec]) == want


# -- RMB: Zhou-Zoey/RMB-Reward-Model-Benchmark@2be3180 eval/scripts/my_run_rm.py: 1 if chosen > rejected else
#    0 (L324, L395-398), ACC = sum / len over every pair given (L420). Best-of-N: the paper (arXiv 2410.09893):
#    an item counts only when the best answer scores above every loser (no scorer in the repository).
def test_rmb_pairwise_set(tmp_path: Path, capsys) -> None:
    """u1 3>1 correct; u2 2=2 tie -> 0; u3 1<3 -> 0; u4 (three-turn dialogue) 4>2 correct: ACC = 2/4."""
    path = PAR / "rmb-Pairwise_set-S1.json"
    assert detect(path) == "rmb"
    s = eval_length(capsys, tmp_path, path)
    assert s["accuracy"] == s["metrics"]["format_score"]["value"] == pytest.approx(1 / 2, abs=1e-12)
    assert s["metrics"]["format_score"]["name"] == "RMB pairwise accuracy"
    multi = next(e for e in load_examples(path, None) if e.id == "u4")
    assert [m.role for m in multi.context] == ["user", "assistant"] and multi.question == "Request u4?"


def test_rmb_best_of_n_set(tmp_path: Path, capsys) -> None:
    """best | losers: b1 5 | 1,2 beats all -> 1; b2 3 | 3,1 ties a loser -> 0 (RewardBench 2's rule would
    give 1/2); b3 2 | 1,4,1 -> 0; b4 4 | 1,2,3 -> 1: accuracy = 2/4 over 4 items (2 + 2 + 3 + 3 = 10 pairs)."""
    path = PAR / "rmb-BoN_set-Discussion.json"
    assert detect(path) == "rmb"
    s = eval_length(capsys, tmp_path, path, "rmb")
    assert s["metrics"]["n"] == 4 and s["n_total"] == 10
    assert s["accuracy"] == s["metrics"]["format_score"]["value"] == pytest.approx(1 / 2, abs=1e-12)
    assert s["metrics"]["strict_accuracy"] == pytest.approx(1 / 2, abs=1e-12)


def test_rmb_skip_leaves_a_malformed_row_out_counted(tmp_path: Path) -> None:
    rows = json.loads((PAR / "rmb-Pairwise_set-S1.json").read_text())
    rows[1]["reject"]["answer"] = ""  # as in RMB's Pairwise_set/Harmlessness/S5.json row 397
    path = tmp_path / "S5.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match="':skip' leaves such rows out"):
        load_examples(path, None, format="rmb")
    with pytest.warns(UserWarning, match=r"rmb left out 1 malformed row\(s\), first at .*S5.json:2: reject.answer"):
        assert [e.id for e in load_examples(path, None, format="rmb:skip")] == ["u1", "u3", "u4"]


def test_rmb_one_set_per_run(tmp_path: Path) -> None:
    folder = tmp_path / "RMB_dataset"
    folder.mkdir()
    for name in ("rmb-BoN_set-Discussion.json", "rmb-Pairwise_set-S1.json"):
        shutil.copy(PAR / name, folder / name)
    with pytest.raises(DataError, match="score RMB's pairwise and best-of-N sets in separate runs") as err:
        load_examples(folder, None, format="rmb")
    assert err.value.file.endswith("rmb-Pairwise_set-S1.json") and "rmb-BoN_set-Discussion.json" in err.value.reason


# -- TRL: trl 1.16.0 trl/data_utils.py extract_prompt (L623-632): the prompt is the longest common prefix, one
#    character back when the character before the first difference is a space.
def test_trl_implicit_prompt_cut_inside_a_word_is_kept_and_warned() -> None:
    from trl.data_utils import maybe_extract_prompt

    path = PAR / "trl-implicit-mid-word.jsonl"
    with pytest.warns(UserWarning, match=r"cut 1 implicit prompt\(s\) inside a word.*first: id yes-yesterday"):
        exs = load_examples(path, None, format="trl")
    raw = json.loads(path.read_text().splitlines()[1])
    assert (exs[1].question, exs[1].chosen, exs[1].rejected) == tuple(maybe_extract_prompt(raw)[k] for k in (
        "prompt", "chosen", "rejected")) == ("Q? Yes", " indeed", "terday")  # TRL's own cut, kept


# -- the summary's headline comes from the format that read the records, never guessed from their keys
def test_format_score_is_the_reading_formats_rule() -> None:
    rb = {"id": "1", "category": "math-prm", "section": "Reasoning", "credit": 1.0, "score_chosen": 2.0,
          "score_rejected": 1.0}
    assert format_score([rb]) is None  # a `section` key alone names no benchmark
    with pytest.warns(UserWarning, match="Chat, Chat Hard, Safety have no subset"):
        assert format_score([{**rb, "format": "rewardbench"}])["value"] == pytest.approx(1 / 4)
    with pytest.warns(UserWarning, match="several formats"):
        assert format_score([{**rb, "format": "rewardbench"}, {**rb, "id": "2", "format": "dsp"}]) is None


def test_a_plugin_format_supplies_its_own_headline() -> None:
    from prbench.formats.base import Reader
    from prbench.registry import FORMATS

    class Mine(Reader):
        name, headline = "mine", "share of records named mine"

        @classmethod
        def score(cls, records):
            return {"name": "Mine", "value": sum(r["credit"] for r in records) / len(records)}

    FORMATS.register("mine", Mine)
    try:
        recs = [{"id": str(i), "category": "c", "credit": c, "format": "mine"} for i, c in enumerate((1.0, 0.0))]
        assert format_score(recs) == {"name": "Mine", "value": 0.5}
    finally:
        FORMATS.unregister("mine")


def test_data_formats_shows_each_headline_rule(capsys) -> None:
    code, out, _ = run_cli(capsys, "data", "formats", "--json")
    rules = {r["name"]: r["headline"] for r in json.loads(out)}
    assert code == 0 and {"judgebench", "rmb"} <= set(rules) and all(rules.values())
    assert rules["rm-bench"].startswith("RM-Bench's") and rules["rewardbench"].startswith("RewardBench's")
    assert "prbench's" in rules["prb"]


# -- extra, on the real DSP files in ../shared/data when present (never a stand-in for the fixtures above)
@pytest.mark.skipif(not (SHARED / "dsp" / "helpful.test.json").is_file(), reason="../shared/data/dsp not present")
def test_real_dsp_text_score_file_has_no_label_ties_and_finite_scores() -> None:
    rows = json.loads((SHARED / "dsp" / "helpful.test.json").read_text())
    with pytest.warns(UserWarning, match="left out 13 malformed"):
        exs = load_examples(SHARED / "dsp" / "helpful.test.json", None, format="dsp:skip")
    assert len(exs) == len(rows) - 13 and not any(r["score"][0] == r["score"][1] for r in rows)
