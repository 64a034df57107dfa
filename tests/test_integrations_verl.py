"""verl: `compute_score` loaded by file path and called exactly as verl 0.9.1 calls it; the exported parquet.

verl needs torch, ray, tensordict and friends to import, so its calling code is replayed, cited from
the `verl-0.9.1-py3-none-any` wheel:

- loading: `verl/trainer/ppo/reward.py::get_custom_reward_fn` -> `verl/utils/import_utils.py::load_module`:
  `spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)`, `exec_module`, not put
  in `sys.modules`; then `partial(_call_with_kwargs, raw_fn, reward_kwargs)` (async: `_call_with_kwargs_async`),
  which merges `{**kwargs, **reward_kwargs}`.
- calling: `verl/experimental/reward_loop/reward_manager/naive.py::NaiveRewardManager.run_single`:
  `extra_info = non_tensor_batch.get("extra_info", {})`, plus `num_turns` and `rollout_reward_scores`;
  `compute_score(data_source=..., solution_str=..., ground_truth=non_tensor_batch["reward_model"]["ground_truth"],
  extra_info=extra_info)`, awaited when `inspect.iscoroutinefunction(compute_score)`; a dict result's
  `score` is the reward. The legacy `verl/workers/reward_manager/naive.py` makes the same call, synchronously.
- data: `verl/utils/dataset/rl_dataset.py` reads the parquet with `datasets.load_dataset("parquet", ...)`,
  `prompt_key` "prompt" (chat messages), `reward_fn_key` "data_source".
"""

from __future__ import annotations

import asyncio
import inspect
import os
from functools import partial
from pathlib import Path

import httpx
import pytest

from prbench.context.conditions import build_view
from prbench.context.retrieval import load_retriever
from prbench.data import load_examples
from prbench.evaluation.scoring import score_cached
from prbench.integrations import verl as verl_hook
from prbench.integrations.export import verl_rows, write_parquet
from prbench.rewards.base import load_rm
from prbench.serve.server import ThreadedServer, create_app
from prbench.store.cache import NullCache

ANSWERS = ["Meter for the highlights and push one stop.", "Try a cheap 50mm.", "Use a tripod at dusk."]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> Path:
    from prbench.testing.tiny import make_tiny_seq_classifier

    return make_tiny_seq_classifier(tmp_path_factory.mktemp("rm"), seed=7)


@pytest.fixture(scope="module")
def items():
    return load_examples("sample", "source", limit=3)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory, items) -> Path:
    return write_parquet(verl_rows(items, condition="profile", top_k=3), tmp_path_factory.mktemp("verl") / "t.parquet")


def verl_load(path: str, reward_kwargs: dict):
    """get_custom_reward_fn + load_module, as in verl 0.9.1."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verl_fn(module, name: str, reward_kwargs: dict):
    raw = getattr(module, name)

    def call(raw_fn, extra, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **extra})

    async def acall(raw_fn, extra, *args, **kwargs):
        return await raw_fn(*args, **{**kwargs, **extra})

    return partial(acall if inspect.iscoroutinefunction(raw) else call, raw, reward_kwargs)


def run_single(compute_score, row: dict, response_str: str) -> float:
    """NaiveRewardManager.run_single's call (reward loop), sync or async."""
    extra_info = row.get("extra_info", {})
    extra_info["num_turns"] = None
    extra_info["rollout_reward_scores"] = {}
    kwargs = {"data_source": row["data_source"], "solution_str": response_str,
              "ground_truth": row["reward_model"]["ground_truth"], "extra_info": extra_info}
    if inspect.iscoroutinefunction(compute_score):
        result = asyncio.run(compute_score(**kwargs))
    else:
        result = compute_score(**kwargs)
    return result["score"] if isinstance(result, dict) else result


def dataset_rows(path: Path) -> list[dict]:
    import datasets

    return [dict(r) for r in datasets.load_dataset("parquet", data_files=str(path))["train"]]


def test_export_verl_has_the_columns_verl_reads(parquet, items) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    assert {"data_source", "prompt", "reward_model", "extra_info"} <= set(table.column_names)
    rows = dataset_rows(parquet)
    assert len(rows) == len(items)
    for i, (row, it) in enumerate(zip(rows, items)):
        assert row["data_source"] == "prbench"
        assert row["prompt"][0]["role"] == "user" and it.question in row["prompt"][0]["content"]
        assert row["reward_model"]["ground_truth"] == it.id
        info = row["extra_info"]
        assert info["id"] == it.id and info["question"] == it.question and info["index"] == i
        assert [p["text"] for p in info["profile"]] == [p.text for p in it.profile]
        assert "rubric_aspects" not in info and "narrative" not in info


def test_compute_score_by_path_equals_the_server_and_eval(parquet, rm_dir, items) -> None:
    rm = load_rm(f"hf:{rm_dir}", device="cpu", batch_size=4)
    ret = load_retriever("bm25")
    expected = [score_cached(rm, [(build_view(it, "profile", retriever=ret, top_k=3), a)], NullCache())[0].value
                for it, a in zip(items, ANSWERS)]
    module = verl_load(verl_hook.__file__, {})
    with ThreadedServer(create_app(rm, "profile", top_k=3)) as srv:
        via_server = {"url": srv.base_url}
        sync = [run_single(verl_fn(module, "compute_score", via_server), row, a)
                for row, a in zip(dataset_rows(parquet), ANSWERS)]
        fn = verl_fn(module, "compute_score_async", via_server)
        assert inspect.iscoroutinefunction(fn)  # the reward loop awaits it
        awaited = [run_single(fn, row, a) for row, a in zip(dataset_rows(parquet), ANSWERS)]
        server = httpx.post(f"{srv.base_url}/score", json={"items": [
            {"id": it.id, "query": it.question, "response": a, "profile": [p.model_dump() for p in it.profile]}
            for it, a in zip(items, ANSWERS)]}).json()["scores"]
    assert sync == awaited
    assert sync == pytest.approx(server, abs=1e-5)
    assert sync == pytest.approx(expected, abs=1e-6)
    # in-process RM (no server): the same rewards
    local = [run_single(verl_fn(module, "compute_score", {"rm": f"hf:{rm_dir}", "device": "cpu", "top_k": 3}), row, a)
             for row, a in zip(dataset_rows(parquet), ANSWERS)]
    assert local == pytest.approx(expected, abs=1e-6)


def test_compute_score_fails_loudly_and_flags_invalid(parquet, tmp_path) -> None:
    from prbench.errors import PrbenchError

    module = verl_load(verl_hook.__file__, {})
    row = dataset_rows(parquet)[0]
    with pytest.raises(PrbenchError, match="exactly one reward source"):
        run_single(verl_fn(module, "compute_score", {}), row, "x")
    with ThreadedServer(create_app(load_rm("baseline:length"), "oracle")) as srv, \
            pytest.raises(PrbenchError, match="422"):  # the oracle condition needs the rubric
        run_single(verl_fn(module, "compute_score", {"url": srv.base_url}), row, "x y")
    res = module.compute_score("prbench", "two words", row["reward_model"]["ground_truth"], row["extra_info"],
                               rm="baseline:length", fallback_reward=-2.0)
    assert res == {"score": 2.0, "prbench_invalid": 0.0}


def test_cli_export_writes_both_datasets(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from prbench.cli import _register, app

    _register()
    runner = CliRunner()
    res = runner.invoke(app, ["export", "verl", "--limit", "3", "--out", str(tmp_path / "v.parquet"), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["rows"] == 3 and info["reward_file"] == verl_hook.__file__
    assert [r["reward_model"]["ground_truth"] for r in dataset_rows(tmp_path / "v.parquet")] == \
        [it.id for it in load_examples("sample", "source", limit=3)]
    res = runner.invoke(app, ["export", "openrlhf", "--limit", "2", "-c", "oracle", "--out", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and "rubric_aspects" in json.loads(rows[0]["label"])
    bad = runner.invoke(app, ["export", "verl", "-c", "wrong-profile", "--out", str(tmp_path / "x.parquet")])
    assert bad.exit_code != 0 and not (tmp_path / "x.parquet").exists()
