"""No silently wrong number, round two (issue #31): one regression test per item, each asserting
the right number, or the one-line error and its exit code.

Items 7 (DSP NaN), 8 (leaderboard columns) and 12 (meta/report reader) are tested with their own
fixes. Everything here is tiny: baselines, the built-in sample, a frozen-encoder head of one epoch.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

from prbench.errors import PrbenchError
from prbench.testing.cli import run_cli

FIX = Path(__file__).parent / "data" / "formats"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # the default --out (runs/) lands here


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sample_rows(n: int) -> list[dict]:
    from prbench.raw import sample_path

    return [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines()[:n]]


def _prb_rows(users: int, train: int, test: int, seed: int = 0) -> list[dict]:
    """SynthesizeMe-shaped rows (`personalrewardbench`): per user, `train` pairs, then `test` pairs whose
    labels are coin flips (a model trained on them would look good on noise)."""
    rng = random.Random(seed)
    rows = []
    for u in range(users):
        for i in range(train + test):
            good, bad = f"a careful detailed answer number {i} for user {u}", f"no {i}"
            if i >= train and rng.random() < 0.5:
                good, bad = bad, good
            rows.append({"id": f"u{u}-{i}", "user_id": f"u{u}", "split": "train" if i < train else "test",
                         "context": [{"role": "user", "content": f"question {i} of user {u} about cooking"}],
                         "chosen": {"role": "assistant", "content": good},
                         "rejected": {"role": "assistant", "content": bad}})
    return rows


# -- 1: training reads the train split ---------------------------------------------------------------------
def test_1_train_reads_the_train_split_and_refuses_test_only_data(tmp_path: Path, capsys) -> None:
    data = _jsonl(tmp_path / "prb.jsonl", _prb_rows(4, 8, 6))
    code, _, err = run_cli(capsys, "train", "bt", "--data", str(data), "--frozen-encoder", "--no-protocol",
                           "--epochs", "1", "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["train"]["pairs"] == 32  # 4 users x 8 train rows; was 24 (the test rows)
    only_test = _jsonl(tmp_path / "test-only.jsonl", [r for r in _prb_rows(4, 8, 6) if r["split"] == "test"])
    code, _, err = run_cli(capsys, "train", "lore", "--data", str(only_test), "--out", str(tmp_path / "x"))
    assert code == 2 and err.count("\n") == 1
    assert "no train pairs: all 24 pairs are in the test split" in err and "--split test" in err


def test_1_prism_within_trains_on_its_train_pairs() -> None:
    from prbench.data.pairs import iter_pairs, load_training_pairs

    train = {p.id for p in load_training_pairs(FIX / "prism")}
    test = {p.id for p in iter_pairs(FIX / "prism", "test")}
    assert train and test and not train & test
    assert train == {p.id for p in iter_pairs(FIX / "prism", "train")}


# -- 2: a run's identity holds its data's content ---------------------------------------------------------
def test_2_same_name_other_content_is_a_named_config_change(tmp_path: Path, capsys) -> None:
    rows = _sample_rows(8)
    a = _jsonl(tmp_path / "a" / "data.jsonl", rows)
    b = _jsonl(tmp_path / "b" / "data.jsonl", [{**r, "chosen": r["rejected"], "rejected": r["chosen"]} for r in rows])
    args = ["eval", "-m", "baseline:length", "--out", str(tmp_path / "runs"), "--json", "-q"]
    code, out, err = run_cli(capsys, *args, "--data", str(a))
    assert code == 0, err
    first = json.loads(out)[0]["accuracy"]
    code, out, err = run_cli(capsys, *args, "--data", str(b))
    assert code == 2 and "data_digest" in err and err.count("\n") == 1  # never the earlier number
    a.write_text(b.read_text())  # edited in place
    code, _, err = run_cli(capsys, *args, "--data", str(a))
    assert code == 2 and "data_digest" in err
    code, out, err = run_cli(capsys, *args, "--data", str(b), "--out", str(tmp_path / "other"))
    assert code == 0 and json.loads(out)[0]["accuracy"] == pytest.approx(1 - first)


# -- 3: a condition with no context says so ---------------------------------------------------------------
def test_3_history_on_data_without_history_fails_with_one_line(tmp_path: Path, capsys) -> None:
    for data, cond in (("sample", "history"), (str(FIX / "rewardbench.jsonl"), "history"),
                       (str(FIX / "hh-rlhf.jsonl"), "persona")):
        code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", data, "-c", cond, "--limit", "5",
                               "-q")
        assert code == 2 and err.count("\n") == 1, err
        assert f"condition '{cond}': all " in err and "scored without context" in err


def test_3_users_without_history_are_marked_and_counted(tmp_path: Path, capsys) -> None:
    rows = _prb_rows(3, 4, 2) + [r for r in _prb_rows(4, 4, 2) if r["user_id"] == "u3" and r["split"] == "test"]
    data = _jsonl(tmp_path / "p.jsonl", rows)
    code, out, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "--data", str(data), "-c", "history",
                             "--out", str(tmp_path / "runs"), "--json", "-q")
    assert code == 0, err
    [s] = json.loads(out)
    assert s["metrics"]["n_no_context"] == 2 and s["n_total"] == 8
    recs = [json.loads(line) for line in (Path(s["path"]) / "examples.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in recs if r.get("no_context")) == ["u3-4", "u3-5"]


# -- 4: one format per folder -------------------------------------------------------------------------------
def test_4_a_folder_of_mixed_formats_is_refused_naming_the_files(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(FIX / "rewardbench.jsonl", folder / "b-rewardbench.jsonl")
    shutil.copy(FIX / "trl-standard-explicit.jsonl", folder / "a-trl.jsonl")
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(folder), "-q")
    assert code == 2 and err.count("\n") == 1
    assert "mixes formats" in err and "a-trl.jsonl is trl" in err and "b-rewardbench.jsonl is rewardbench" in err


# -- 5: wrong-* donors do not depend on filters ---------------------------------------------------------------
def test_5_donors_are_the_same_with_and_without_limit_and_categories() -> None:
    from prbench import evaluate

    whole = {r.id: r.donor for r in evaluate("baseline:lexical", "sample", "wrong-profile", n_boot=10).records}
    limited = evaluate("baseline:lexical", "sample", "wrong-profile", limit=10, n_boot=10).records
    assert len(limited) == 10 and all(r.donor == whole[r.id] for r in limited)
    cat = next(iter({r.category for r in limited}))
    filtered = evaluate("baseline:lexical", "sample", "wrong-profile", categories=[cat], n_boot=10).records
    assert filtered and all(r.donor == whole[r.id] for r in filtered)


# -- 6: history leaks ---------------------------------------------------------------------------------------------
def test_6_untimed_conversations_are_never_earlier(tmp_path: Path) -> None:
    from prbench.context.conditions import eligible_history
    from prbench.data import load_examples

    folder = tmp_path / "prism"
    shutil.copytree(FIX / "prism", folder)
    convs = [json.loads(line) for line in (folder / "conversations.jsonl").read_text().splitlines()]
    untimed = convs[0]["conversation_id"]
    del convs[0]["generated_datetime"]
    _jsonl(folder / "conversations.jsonl", convs)
    shown = [h.id for ex in load_examples(folder, None) if ex.time for h in eligible_history(ex, ex.history)]
    assert shown and not any(h.startswith(f"{untimed}:") for h in shown)


def test_6_a_judged_pair_swapped_in_its_own_history_is_never_shown() -> None:
    from prbench.context.conditions import eligible_history
    from prbench.schema import Example, HistoryPair

    swapped = HistoryPair(id="old", prompt="q?", chosen="worse", rejected="better")
    other = HistoryPair(id="o2", prompt="another question", chosen="x y", rejected="z")
    ex = Example(id="p1", question="q?", chosen="better", rejected="worse", category="c", profile=[],
                 rubric_aspects=[], history=[swapped, other])
    assert [h.id for h in eligible_history(ex, ex.history)] == ["o2"]


# -- 9: LaMP folders read every JSON Lines spelling ------------------------------------------------------------
def test_9_lamp_folder_reads_gz_and_upper_case(tmp_path: Path, capsys) -> None:
    def row(i: int) -> dict:
        return {"id": f"q{i}", "input": f"Write a title for paper {i}", "output": f"Title {i}",
                "profile": [{"id": f"p{i}", "title": f"An earlier paper {i}"}]}

    folder = tmp_path / "lamp"
    _jsonl(folder / "a.jsonl", [row(0)])
    _jsonl(folder / "B.JSONL", [row(1)])
    with gzip.open(folder / "c.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(row(2)) + "\n")
    _jsonl(folder / "sub" / "d.Jsonl", [row(3)])
    from prbench.data import load_examples

    assert sorted(it.id for it in load_examples(folder, None, format="lamp")) == ["q0", "q1", "q2", "q3"]
    only = tmp_path / "gz"
    only.mkdir()
    shutil.copy(folder / "c.jsonl.gz", only / "c.jsonl.gz")
    code, out, err = run_cli(capsys, "data", "validate", str(only), "--format", "lamp")
    assert code == 0 and "1 valid records" in out, err


# -- 10 and 14: study configs fully checked at load ---------------------------------------------------------------
STUDY = "name: s\ndata: sample\nmodels:\n  - spec: baseline:length\n"


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_10_duplicate_keys_are_refused(tmp_path: Path, capsys) -> None:
    path = _study(tmp_path, STUDY + "models:\n  - spec: baseline:random\n")
    code, _, err = run_cli(capsys, "study", str(path), "--dry-run")
    assert code == 2 and err.count("\n") == 1
    assert f"{path}:5: models: key given twice (first on line 3)" in err


@pytest.mark.parametrize("extra, line, field", [
    ("benchmarks:\n  - data: sample\n    limit: 0\n", 7, "benchmarks.0.limit"),
    ("benchmarks:\n  - data: sample\n    limit: -3\n", 7, "benchmarks.0.limit"),
    ("benchmarks:\n  - data: sample\n    limit: 1e20\n", 7, "benchmarks.0.limit"),
    ("benchmarks:\n  - data: sample\n    limit: true\n", 7, "benchmarks.0.limit"),
    ("benchmarks:\n  - data: sample\n    format: rewardbench:x\n", 7, "benchmarks.0.format"),
    ("format: prism:nope\n", 5, "format"),
    ("stages: [personalize]\npersonalize:\n  methods: [lore, nope]\n", 7, "personalize.methods"),
    ("stages: [personalize]\npersonalize:\n  condition: histroy\n", 7, "personalize.condition"),
    ("stages: [personalize]\npersonalize:\n  ks: [0, -1]\n", 7, "personalize.ks.1"),
    ("stages: [personalize]\npersonalize:\n  options:\n    lore:\n      rank: 0\n", 7, "personalize.options"),
])
def test_14_study_parts_are_checked_at_load(tmp_path: Path, capsys, extra: str, line: int, field: str) -> None:
    path = _study(tmp_path, STUDY + extra)
    code, _, err = run_cli(capsys, "study", str(path), "--dry-run")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path}:{line}: {field}" in err


def test_14_an_empty_study_is_refused(tmp_path: Path, capsys) -> None:
    for text, want in (('name: ""\nmodels: []\n', ":1: name"), ("name: s\nmodels: []\n", ":2: models: no models")):
        path = _study(tmp_path, text)
        code, _, err = run_cli(capsys, "study", str(path), "--dry-run")
        assert code == 2 and want in err, err


# -- 11: generated ids unique across a folder ------------------------------------------------------------------
def test_11_generated_ids_do_not_collide_across_files(tmp_path: Path) -> None:
    from prbench.data import load_examples

    rows = [{k: v for k, v in json.loads(line).items() if k != "id"}
            for line in (FIX / "rewardbench.jsonl").read_text().splitlines()]
    _jsonl(tmp_path / "rb" / "part1.jsonl", rows)
    _jsonl(tmp_path / "rb" / "part2.jsonl", rows)
    items = load_examples(tmp_path / "rb")
    assert len(items) == 2 * len(rows) and len({it.id for it in items}) == len(items)
    assert load_examples(tmp_path / "rb" / "part1.jsonl")[0].id == f"{rows[0]['subset']}:1"  # one file: as before


# -- 13: trained folders checked against their manifest ------------------------------------------------------------
@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import os

    from prbench.data import write_examples
    from prbench.data.synth_users import synth_examples

    root = tmp_path_factory.mktemp("head")
    data = root / "synth.jsonl"
    write_examples(synth_examples(4, 4, seed=0), data)
    old = os.environ.get("PRBENCH_CACHE_DIR")
    os.environ["PRBENCH_CACHE_DIR"] = str(root / "cache")
    try:
        from prbench.data.pairs import load_training_pairs
        from prbench.train.methods import train_method

        train_method("pal", load_training_pairs(data), root / "pal", {"epochs": 1}, run_protocol_check=False)
    finally:
        os.environ.pop("PRBENCH_CACHE_DIR") if old is None else os.environ.__setitem__("PRBENCH_CACHE_DIR", old)
    return root


def _damaged(head: Path, tmp_path: Path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(head / "pal", out)
    return out


def test_13_damaged_trained_folders_name_the_file(head: Path, tmp_path: Path, capsys) -> None:
    from prbench.manifest import MANIFEST_FILE
    from prbench.rewards import load_rm

    assert (head / "pal" / MANIFEST_FILE).is_file()
    load_rm(f"pal:{head / 'pal'}")  # intact: loads
    m = _damaged(head, tmp_path)
    weights = m / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    code, _, err = run_cli(capsys, "eval", "-m", f"pal:{m}", "--data", str(head / "synth.jsonl"), "-c", "profile",
                           "--limit", "2", "-q")
    assert code == 2 and err.count("\n") == 1 and "model.safetensors: changed since training" in err
    (m / MANIFEST_FILE).unlink()  # a trained folder without its manifest: refused, never loaded unchecked
    with pytest.raises(PrbenchError, match=r"prbench_manifest\.json: missing, though prbench_rm\.json says"):
        load_rm(f"pal:{m}")
    for edit in ("dims", "users"):
        m = _damaged(head, tmp_path / edit)
        cfg = json.loads((m / "config.json").read_text())
        if edit == "dims":
            cfg["dim"] = cfg["dim"] + 1
        else:
            cfg["users"] = list(reversed(cfg["users"]))
        (m / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(PrbenchError, match=r"config\.json: .*changed since training"):
            load_rm(f"pal:{m}")
    m = _damaged(head, tmp_path / "gone")
    (m / "model.safetensors").unlink()
    with pytest.raises(PrbenchError, match=r"^bt:.*model\.safetensors: missing"):
        load_rm(f"bt:{m}")


def test_42_10_trained_folder_without_manifest_never_loads_silently(head: Path, tmp_path: Path, capsys) -> None:
    """Issue 42 item 10: flipped weights (same size) or a reordered user list, manifest deleted: one line, exit 2."""
    from prbench.manifest import MANIFEST_FILE
    from prbench.rewards import load_rm

    for edit in ("flip", "users"):
        m = _damaged(head, tmp_path / edit)
        if edit == "flip":
            w = bytearray((m / "model.safetensors").read_bytes())
            w[-4:] = bytes(b ^ 0x80 for b in w[-4:])  # the sign bit of the last float
            (m / "model.safetensors").write_bytes(bytes(w))
        else:
            cfg = json.loads((m / "config.json").read_text())
            cfg["users"] = list(reversed(cfg["users"]))
            (m / "config.json").write_text(json.dumps(cfg))
        (m / MANIFEST_FILE).unlink()
        for prefix in ("pal", "bt"):
            with pytest.raises(PrbenchError, match=r"prbench_manifest\.json: missing, though prbench_rm\.json"):
                load_rm(f"{prefix}:{m}")
        code, _, err = run_cli(capsys, "eval", "-m", f"pal:{m}", "--data", str(head / "synth.jsonl"), "-c",
                               "profile", "--limit", "2", "-q")
        assert code == 2 and err.count("\n") == 1 and "prbench_manifest.json: missing" in err, err


# -- 15: strict --format options, --max-invalid range ---------------------------------------------------------------
@pytest.mark.parametrize("args, want", [
    (["--data", str(FIX / "rewardbench.jsonl"), "-F", "rewardbench:anything"], "takes no options"),
    (["--data", str(FIX / "prism"), "-F", "prism:within:0.25:1:extra"], "expected prism[:MODE[:SHARE[:SEED]]]"),
    (["--data", str(FIX / "prism"), "-F", "prism:within:1e-9"], "puts no conversation in the test split"),
    (["--data", "sample", "--max-invalid", "-1"], "--max-invalid must be a share between 0 and 1"),
    (["--data", "sample", "--max-invalid", "nan"], "--max-invalid must be a share between 0 and 1, got nan"),
    (["--data", "sample", "--max-invalid", "2"], "--max-invalid must be a share between 0 and 1"),
])
def test_15_strict_options(capsys, args: list[str], want: str) -> None:
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", *args, "-q")
    assert code == 2 and err.count("\n") == 1 and want in err, err


# -- 16: messages that say what is wrong -------------------------------------------------------------------------
def test_16_messages(tmp_path: Path, capsys) -> None:
    from prbench.formats import detect

    trl = [{**json.loads(line), "user_id": "u1"} for line in (FIX / "trl-standard-explicit.jsonl").read_text().splitlines()]
    path = _jsonl(tmp_path / "trl-users.jsonl", trl)
    assert detect(path) == "prb"  # also prbench's own pair-file shape (train reads it natively)
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(path), "-q")
    assert code == 2 and err.count("\n") == 1 and "read the file with --format trl" in err
    from prbench.data import load_examples

    assert {ex.user_id for ex in load_examples(path, format="trl")} == {"u1"}
    code, _, err = run_cli(capsys, "data", "validate", str(FIX / "longlamp.jsonl"))
    assert code == 2 and "--kind source" in err
    folder = tmp_path / "prism"
    folder.mkdir()
    shutil.copy(FIX / "prism" / "conversations.jsonl", folder)
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(folder), "-c", "persona", "-q")
    assert code == 2 and "survey.jsonl" in err and "does not provide" not in err


# -- 17: the interrupt line counts what is on disk ----------------------------------------------------------------
def test_17_interrupt_count_is_read_from_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The signal lands right after the fsynced append, before the driver's own count moves: the
    window that printed "16 of 63" with 32 on disk. Deterministic: no timing involved."""
    from prbench import evaluate
    from prbench.runtime import interrupt
    from prbench.store.runs import RunDir

    real, calls = RunDir.append, []

    def append_then_interrupt(self, records):
        real(self, records)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "append", append_then_interrupt)
    with pytest.raises(KeyboardInterrupt) as info:
        evaluate("baseline:length", "sample", "none", out=tmp_path / "runs", batch_size=4)
    [examples] = list((tmp_path / "runs").rglob("examples.jsonl"))
    on_disk = len(examples.read_text().splitlines())
    assert on_disk == 4 + 16  # the first append is one batch (4 items), the next four batches
    assert interrupt.notes(info.value)[0].startswith("20 of 63 items saved in")
