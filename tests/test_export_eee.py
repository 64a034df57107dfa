"""`prbench export eee`: every evaluation and downstream run kind in the Every Eval Ever v0.3.0 schema.

Each written file is checked against this project's typed models and upstream's naming conventions
(always: evaleval/every_eval_ever @ 9bce413, CONTRIBUTING.md "Filling in the schema" items 1-3: `model_info.id`
as `developer/model`, `evaluation_id` as `{benchmark}/{model_id}/{retrieved_timestamp}`, platform or engine
named), against the upstream JSON Schema (`schemas/eval.schema.json`, `schemas/instance_level_eval.schema.json`)
where ../shared holds a copy, and by upstream's own validator (`every_eval_ever.validator.validation_core.
validate_file`: schema, path layout, companion file, score bounds, deployment axes) where `every_eval_ever` is
importable (it needs Python >= 3.12 from PyPI; an upstream checkout on PYTHONPATH works on 3.11).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from test_meta import credits_with_mean, values_with_mean, write_ds, write_eval_run, write_pa_run

from prbench.eee import EEEAggregate, EEEInstance, export_eee

SPEC_DIR = Path(__file__).resolve().parents[2] / "shared" / "specs" / "every_eval_ever"  # ../shared beside the checkout
if not SPEC_DIR.is_dir():
    SPEC_DIR = Path("/work/shared/specs/every_eval_ever")  # worktrees of the project's main checkout
IDS = [f"item-{i:03d}" for i in range(8)]


def schemas() -> tuple[dict, dict] | None:
    if not (SPEC_DIR / "eval.schema.json").is_file():
        return None
    return (json.loads((SPEC_DIR / "eval.schema.json").read_text()),
            json.loads((SPEC_DIR / "instance_level_eval.schema.json").read_text()))


def upstream_validator():
    """Upstream's `eee-validate` (every_eval_ever/validator/validate.py `main`: exit 0 clean, 1 errors, 2 warnings)."""
    try:
        from every_eval_ever.validator.validate import main
    except ImportError:
        return None
    return main


def upstream_form(agg: dict, text: str) -> None:
    """What upstream's CONTRIBUTING.md asks beyond the schema, and what an export must never hold."""
    info = agg["model_info"]
    assert re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._:-]+", info["id"]), info["id"]  # developer/model
    assert info["developer"] == info["id"].split("/")[0]
    assert ("inference_platform" in info) != ("inference_engine" in info), info  # one of the two, CONTRIBUTING 3
    data = agg["evaluation_results"][0]["source_data"]["dataset_name"]
    assert data not in ("?", "_", "") and all(r["source_data"]["dataset_name"] == data
                                             for r in agg["evaluation_results"])
    bench, model_id, stamp = agg["evaluation_id"].split("/")  # {benchmark}/{model_id}/{retrieved_timestamp}
    assert bench == (re.sub(r"[^A-Za-z0-9._-]+", "_", data).strip("_.") or "_") and model_id == info["id"].replace("/", "_") and stamp == agg["retrieved_timestamp"]
    float(stamp)  # Unix epoch seconds
    assert "/tmp/" not in text and "/home/" not in text and "/work/" not in text, "an absolute local path"


def check(files: list[str]) -> dict[str, dict]:
    """Validate every written pair of files; returns the aggregates by aggregate file."""
    upstream = schemas()
    validator = upstream_validator()
    if upstream is not None:
        import jsonschema
    out = {}
    for f in (Path(x) for x in files if x.endswith(".json")):
        assert f.parts[-5] == "data"
        agg = json.loads(f.read_text())
        EEEAggregate.model_validate(agg)
        root = f.parents[4]  # data/<benchmark>/<developer>/<model>/<uuid>.json
        inst_path = root / agg["detailed_evaluation_results"]["file_path"]
        upstream_form(agg, f.read_text() + inst_path.read_text())
        if validator is not None:
            assert validator([str(f.resolve()), str(inst_path.resolve())]) == 0, f
        body = inst_path.read_bytes()
        assert hashlib.sha256(body).hexdigest() == agg["detailed_evaluation_results"]["checksum"]
        lines = [json.loads(x) for x in body.decode().splitlines()]
        assert len(lines) == agg["detailed_evaluation_results"]["total_rows"]
        result_ids = {r["evaluation_result_id"] for r in agg["evaluation_results"]}
        for line in lines:
            EEEInstance.model_validate(line)
            assert line["evaluation_id"] == agg["evaluation_id"] and line["evaluation_result_id"] in result_ids
        if upstream is not None:
            jsonschema.validate(agg, upstream[0])
            for line in lines:
                jsonschema.validate(line, upstream[1])
        kind = agg["source_metadata"]["additional_details"]["prbench_run_kind"]
        out[f"{kind}/{agg['model_info']['additional_details']['prbench_spec']}/{f.name}"] = {"agg": agg,
                                                                                            "lines": lines}
    return out


def test_eval_bon_rl_rgd_and_policy_accuracy_runs_export_and_validate(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_eval_run(runs / "eval", "rm:a", credits_with_mean(6, 8) [:7] + [None], ids=IDS)
    write_eval_run(runs / "eval", "judge:x", credits_with_mean(5, 8), ids=IDS, pairwise=True)
    write_ds(runs / "downstream", "rm:a", {i: {1: 1.0, 2: 1.5, 4: v} for i, v in zip(IDS, values_with_mean(1.6, 8))},
             setting="bon", condition="profile")
    write_ds(runs / "downstream", "rm:a", dict(zip(IDS, values_with_mean(1.2, 8))), setting="rl")
    write_ds(runs / "downstream", "rm:a", dict(zip(IDS, values_with_mean(1.1, 8))), setting="rgd",
             extra={"policy": "p", "w": 1.0, "metric": "grade"})
    write_pa_run(runs, "rm:a", dict(zip(IDS, credits_with_mean(5, 8))), {})
    write_pa_run(runs, None, dict(zip(IDS, [0.5] * 8)), {}, w=0.0)  # the plain policy: a reference, not exported
    res = export_eee([runs], tmp_path / "eee")
    got = check(res["written"])
    kinds = sorted(k.split("/")[0] for k in got)
    assert kinds == ["bon", "eval", "eval", "policy-accuracy", "rgd", "rl"], kinds
    assert len(res["not_exported"]) == 1 and "policy-accuracy" in res["not_exported"][0]
    ev = next(v for k, v in got.items() if k.startswith("eval/rm:a/"))
    (result,) = ev["agg"]["evaluation_results"]
    assert result["score_details"]["score"] == pytest.approx(6 / 7)  # the invalid pair is left out
    assert len(ev["lines"]) == 7 and sum(x["evaluation"]["is_correct"] for x in ev["lines"]) == 6
    assert ev["agg"]["eval_library"] == {"name": "prbench", "version": ev["agg"]["eval_library"]["version"]}
    bon = next(v for k, v in got.items() if k.startswith("bon/"))
    assert [r["evaluation_result_id"] for r in bon["agg"]["evaluation_results"]] == ["bon:k=1", "bon:k=2", "bon:k=4"]
    assert len(bon["lines"]) == 3 * 8  # one instance per item and aggregate result
    again = export_eee([runs], tmp_path / "eee2")  # the same runs give the same bytes
    assert [Path(f).read_bytes() for f in sorted(res["written"])] == [Path(f).read_bytes()
                                                                     for f in sorted(again["written"])]


def test_a_policy_accuracy_run_writes_downstream_json_and_exports(tiny_engine, tmp_path: Path) -> None:
    from test_policy_accuracy import KW, RecordingRM, hashed, make_examples

    from prbench.capabilities.policy_accuracy.driver import policy_accuracy
    from prbench.runkinds import open_run

    res = policy_accuracy(tiny_engine, RecordingRM(hashed), make_examples(), tmp_path / "o", w=1.0, **KW)
    run = open_run(res.path)
    assert run.kind.name == "policy-accuracy" and run.downstream is not None
    assert run.downstream.setting == "policy_accuracy"
    assert run.downstream.expected[0] == pytest.approx(res.summary.policy_accuracy)
    assert set(run.downstream.per_item) == {r["id"] for r in res.records}
    got = check(export_eee([tmp_path / "o"], tmp_path / "eee")["written"])
    assert len(got) == 1 and next(iter(got)).startswith("policy-accuracy/")


def test_cli_export_eee(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prbench.cli import command_app

    app = command_app("export")
    runs = tmp_path / "runs"
    write_eval_run(runs, "rm:a", credits_with_mean(6, 8), ids=IDS)
    out = CliRunner().invoke(app, ["export", "eee", str(runs), "--out", str(tmp_path / "eee"), "--json"])
    assert out.exit_code == 0, out.output
    assert len(check(json.loads(out.stdout)["written"])) == 1


def test_an_icl_run_exports_its_gold_metrics_per_item(tiny_engine, tmp_path: Path) -> None:
    from test_rgd import make_examples

    from prbench.capabilities.icl.driver import run_icl

    res = run_icl(tiny_engine, make_examples(4), tmp_path / "icl", max_new_tokens=8, encoder=None, n_boot=20,
                  repetition_penalty=1.0)
    (got,) = check(export_eee([tmp_path / "icl"], tmp_path / "eee")["written"]).values()
    by_id = {r["evaluation_result_id"]: r for r in got["agg"]["evaluation_results"]}
    assert set(by_id) == {"icl:rouge1", "icl:rougeL"}
    assert by_id["icl:rouge1"]["score_details"]["score"] == pytest.approx(res.summary.gold.metrics["rouge1"].mean)
    assert len(got["lines"]) == 2 * 4


@pytest.mark.parametrize("spec, want", [
    ("baseline:lexical", ("prbench/baseline-lexical", None, "prbench")),
    ("hf:OpenAssistant/reward-model-deberta-v3-large-v2",
     ("OpenAssistant/reward-model-deberta-v3-large-v2", None, "transformers")),
    ("judge:openai:gpt-4o-mini", ("openai/gpt-4o-mini", "openai", None)),
    ("anthropic:claude-3-5-haiku-20241022", ("anthropic/claude-3-5-haiku-20241022", "anthropic", None)),
    ("lik:builtin:smollm2-135m-instruct", ("HuggingFaceTB/SmolLM2-135M-Instruct", None, "transformers")),
    ("judge:vllm:Qwen/Qwen2.5-7B-Instruct", ("Qwen/Qwen2.5-7B-Instruct", None, "vllm")),
    ("pal:/home/someone/models/pal", ("local/pal", None, "transformers")),
    ("py:/home/someone/my_rm.py:MyRM", ("local/my_rm", None, "prbench")),
])
def test_model_ids_in_upstream_form(spec: str, want: tuple) -> None:
    """CONTRIBUTING.md 1: Hugging Face `developer/model`, or the provider's exact API id; never a local path."""
    from prbench.eee import identity

    got = identity(spec)
    assert (got.id, got.platform, got.engine) == want


def test_a_bon_file_without_its_data_name_takes_it_from_its_samples(tmp_path: Path) -> None:
    """Best-of-N files written before `data` was recorded: the data set comes from the samples folder's config."""
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "config.json").write_text(json.dumps({"data": "/home/someone/dsp.jsonl", "policy": "p"}))
    vals = {i: {1: 1.0, 2: 1.5} for i in IDS}
    write_ds(tmp_path / "runs", "rm:a", vals, setting="bon", extra={"data": None, "samples": str(samples)})
    (got,) = check(export_eee([tmp_path / "runs"], tmp_path / "eee")["written"]).values()
    assert got["agg"]["evaluation_results"][0]["source_data"]["dataset_name"] == "dsp.jsonl"
    write_ds(tmp_path / "runs2", "rm:a", vals, setting="bon", extra={"data": None})
    res = export_eee([tmp_path / "runs2"], tmp_path / "eee2")
    assert res["written"] == [] and "names no data set" in res["skipped"][0]
