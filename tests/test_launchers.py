"""Launched runs: `torchrun --nproc_per_node 2` on CPU (gloo, 127.0.0.1) of every TRL-backed command.

Every rank must exit 0 (torch elastic stops all workers, rank 0 included, when one fails), rank 0
alone saves, samples, grades and prints, and each rank's models sit on its own device. accelerate
1.15's `launch --cpu` runs several CPU processes only through mpirun (not installed), so the
launcher here is torchrun; accelerate sets the same RANK / LOCAL_RANK / WORLD_SIZE variables.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.testing.openai_server import serve
from prbench.testing.records import make_records
from prbench.train import cuda_device


def _torchrun(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """One torchrun launch; a hang is retried once, on a fresh port and folder, and its trace printed.

    Why the retry: `plan train` under torchrun hung after both ranks had trained, once in each of two sessions'
    full suites (2026-12-05, 2026-12-06), never alone (3 + 1 isolated runs); the cause is not found. A second
    hang fails the test with both ranks' stacks."""
    try:
        return _launch(tmp_path / "try1", *args)
    except _Hung as first:
        print(f"torchrun {' '.join(args[:2])} hung once (retrying):\n{first}", file=sys.stderr)
        if "--out" in args:  # what the hung launch wrote is not the retry's
            shutil.rmtree(args[args.index("--out") + 1], ignore_errors=True)
        try:
            return _launch(tmp_path / "try2", *args)
        except _Hung as second:
            pytest.fail(f"torchrun {' '.join(args[:2])} hung twice:\n{second}")


class _Hung(Exception):
    """torchrun did not finish in time; the message is the tail of its stderr (faulthandler's stacks)."""


def _launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PRBENCH_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONFAULTHANDLER": "1"}
    cmd = [torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port), "-m",
           "prbench", *args]
    # Output goes to files, not pipes: a process that outlives torchrun and holds a pipe would make reading it
    # wait forever and look like a hung rank. Such a process is found below and named instead.
    out_path, err_path = tmp_path / "torchrun.out", tmp_path / "torchrun.err"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, text=True, env=env,
                                start_new_session=True)  # its own process group: a hung rank is never left behind
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGABRT)  # faulthandler prints where every rank hangs
            try:
                proc.wait(timeout=30)
            finally:
                _kill_group(proc.pid)
            raise _Hung(err_path.read_text()[-6000:]) from None
    left = _group_left(proc.pid)
    assert not left, f"torchrun {' '.join(args[:2])} exited but left processes behind: {left}"
    return subprocess.CompletedProcess(cmd, proc.returncode, out_path.read_text(), err_path.read_text())


def _group_left(pgid: int, grace: float = 15.0) -> list[str]:
    """The processes of torchrun's group still alive `grace` seconds after it exited (killed, then named)."""
    import time

    import psutil

    def alive() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except (OSError, psutil.Error):
                pass
        return found

    until = time.time() + grace
    while (procs := alive()) and time.time() < until:
        time.sleep(0.5)
    names = []
    for p in procs:
        try:
            names.append(" ".join(p.cmdline())[:200])
        except psutil.Error:
            pass
    _kill_group(pgid)
    return names


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _one_report(res: subprocess.CompletedProcess) -> dict:
    """Both ranks exited 0 and exactly one JSON report (rank 0's) was printed."""
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FAILED" not in res.stderr and "terminate called" not in res.stderr
    assert res.stdout.count("\n{") + res.stdout.startswith("{") == 1, res.stdout[-2000:]
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    from prbench.testing.tiny import make_tiny_causal_lm, make_tiny_seq_classifier

    root = tmp_path_factory.mktemp("tiny")
    items = root / "items.jsonl"
    recs = make_records(6)
    for r in recs:
        r["profile"] = r["profile"][:3]
    items.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return {"lm": make_tiny_causal_lm(root / "lm", seed=0), "rm": make_tiny_seq_classifier(root / "rm", seed=1),
            "items": items}


def test_cuda_resolves_to_the_ranks_own_gpu(monkeypatch) -> None:
    """`cuda` / `auto` become `cuda:LOCAL_RANK` when the model loads (after the launcher set it)."""
    from prbench.engines.transformers_engine import resolve_device as engine_device
    from prbench.rewards.classifier import resolve_device as rm_device

    for var in ("WORLD_SIZE", "LOCAL_RANK", "RANK"):
        monkeypatch.delenv(var, raising=False)
    assert cuda_device() == "cuda" and rm_device("cuda") == "cuda" and engine_device("cuda") == "cuda"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")  # this machine has no GPU: device_count() is 0, not the one-GPU case
    assert cuda_device() == "cuda:1" and rm_device("cuda") == "cuda:1" and engine_device("cuda") == "cuda:1"
    assert rm_device("cpu") == "cpu" and rm_device("cuda:0") == "cuda:0"  # what the user named stays


@pytest.mark.slow
def test_torchrun_rl_every_rank_finishes_rank0_grades_once(tiny, tmp_path) -> None:
    out = tmp_path / "rl"
    with serve(lambda body: json.dumps({"grades": [{"aspect": 1, "score": 1}, {"aspect": 2, "score": 1}]})) as srv:
        res = _torchrun(tmp_path, "rl", "--policy", f"hf:{tiny['lm']}", "--rm", f"hf:{tiny['rm']}", "--data",
                        str(tiny["items"]), "--out", str(out), "--device", "cpu", "--steps", "1",
                        "--num-generations", "2", "--prompts-per-step", "1", "--max-completion-length", "4",
                        "--top-k", "2", "--holdout", "0.34", "--eval-max-new-tokens", "4", "--n-boot", "10",
                        "--no-gradient-checkpointing", "--grader", "openai:grader", "--grader-base-url",
                        srv.base_url, "--json")
        graded = len(srv.requests)
    s = _one_report(res)
    assert s["reward"]["scored"] == 2 and s["heldout_items"] == 2  # rank 0's share of the step: 1 prompt x 2
    assert (out / "policy" / "config.json").is_file() and (out / "downstream.json").is_file()
    # rank 0 alone sampled and graded: each distinct held-out answer (trained + base) once, never per rank
    assert 1 <= graded <= 4 and s["eval"]["n_items"] == 2
    assert json.loads((out / "config.json").read_text())["steps"] == 1


@pytest.mark.slow
def test_torchrun_plan_train_every_rank_finishes(tiny, tmp_path) -> None:
    out = tmp_path / "planner"
    res = _torchrun(tmp_path, "plan", "train", "--base-model", str(tiny["lm"]), "--data", str(tiny["items"]),
                    "--out", str(out), "--steps", "1", "--batch-size", "1", "--top-k", "2", "--max-length", "1024",
                    "--device", "cpu", "--json")
    facts = _one_report(res)
    assert facts["steps"] == 1 and facts["train_items"] == 6 and facts["first_loss"] is not None
    assert (out / "config.json").is_file() and json.loads((out / "prbench_planner.json").read_text()) == \
        {k: v for k, v in facts.items() if k != "out"}
    assert not list(tmp_path.glob(".planner.trainer"))  # rank 0 removed its scratch; no rank left one


@pytest.mark.slow
def test_torchrun_train_finetune_every_rank_finishes(tiny, tmp_path) -> None:
    pairs, out = tmp_path / "pairs.jsonl", tmp_path / "ft"
    made = subprocess.run([sys.executable, "-m", "prbench", "data", "synth-users", str(pairs), "--users", "6",
                           "--items-per-user", "4"], check=False, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    # the default path: the protocol's training on both ranks, rank 0 measures seen vs unseen users and keeps it
    res = _torchrun(tmp_path, "train", "finetune", "--data", str(pairs), "--out", str(out), "--base-model",
                    str(tiny["rm"]), "--max-steps", "1", "--batch-size", "2", "--top-k", "2", "--json")
    report = _one_report(res)
    assert report["method"] == "finetune" and report["loads_as"] == f"finetune:{out}"
    assert report["protocol"]["train"] is not None and report["warnings"] == []
    meta = json.loads((out / "prbench_rm.json").read_text())
    assert meta["kind"] == "finetune" and (out / "model.safetensors").is_file() and (out / "protocol.json").is_file()
    assert 0 < meta["train"]["pairs"] < 24  # the protocol's seen users x train items: the model kept, no refit


def test_two_trainings_under_a_launcher_are_refused(monkeypatch, tmp_path) -> None:
    """Protocol then refit would train twice; the launcher's process group ends after the first."""
    from prbench.errors import PrbenchError
    from prbench.train.methods import train_method

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PrbenchError, match="add --no-refit"):
        train_method("finetune", [], tmp_path, {"max_steps": 1}, refit=True)
