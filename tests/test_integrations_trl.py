"""TRL trainers on real devices: one GPU without a launcher, several processes with torchrun.

TRL 1.16 (`trl/trainer/reward_trainer.py`, `grpo_trainer.py`, `sft_trainer.py`) raises ValueError
when `args.n_gpu > 1`, which transformers 5 sets from `torch.cuda.device_count()` when no launcher
runs (`TrainingArguments._setup_devices`). This machine has no GPU, so the multi-GPU count is
set on real TrainingArguments the way transformers sets it, and the real RewardTrainer decides.
Multi-process training runs for real on CPU with `torchrun --nproc_per_node 2` (gloo): accelerate
1.15's `launch --cpu` runs several CPU processes only through mpirun, which is not installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.errors import PrbenchError
from prbench.train import launched, pin_device, single_process_args


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> Path:
    from prbench.testing.tiny import make_tiny_seq_classifier

    return make_tiny_seq_classifier(tmp_path_factory.mktemp("tiny"), seed=1)


def _pairs_dataset():
    import datasets

    msg = [{"role": "user", "content": "which lens?"}]
    return datasets.Dataset.from_dict({"prompt": [msg] * 4,
                                       "chosen": [[{"role": "assistant", "content": "a cheap 50mm"}]] * 4,
                                       "rejected": [[{"role": "assistant", "content": "anything"}]] * 4})


def test_one_process_on_a_multi_gpu_node_is_pinned_to_one_device(tiny_rm, tmp_path) -> None:
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_rm)

    def trainer(pin: bool):
        args = trl.RewardConfig(output_dir=str(tmp_path / "o"), use_cpu=True, report_to="none", max_steps=1)
        assert args.n_gpu == 0
        args._n_gpu = 8  # what transformers computes on an 8-GPU node without a launcher
        if pin:
            single_process_args(args)
        return trl.RewardTrainer(model=str(tiny_rm), args=args, train_dataset=_pairs_dataset(), processing_class=tok)

    with pytest.raises(ValueError, match="DataParallel"):
        trainer(pin=False)
    assert trainer(pin=True).args.n_gpu == 1


def test_pin_device(monkeypatch) -> None:
    for var in ("WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert not launched()
    assert pin_device("cpu") == "cpu" and pin_device(None) == "auto" and pin_device("auto") == "auto"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(PrbenchError, match="names 2 device"):
        pin_device("cuda:2")
    with pytest.raises(PrbenchError, match="cuda:N"):
        pin_device("cuda:x")
    with pytest.raises(PrbenchError, match="no CUDA device 5"):  # this machine has none: a clear error
        pin_device("cuda:1")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"  # physical id 5 (the second visible) was selected
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched() and pin_device("cuda:1") == "auto"  # the launcher gives each rank its device


@pytest.mark.slow
def test_torchrun_two_cpu_processes_train_bt(tiny_rm, tmp_path) -> None:
    """`torchrun --nproc_per_node 2 -m prbench train bt ...`: data split over 2 ranks, rank 0 saves."""
    pairs = tmp_path / "pairs.jsonl"
    made = subprocess.run([sys.executable, "-m", "prbench", "data", "synth-users", str(pairs), "--users", "4",
                           "--items-per-user", "2"], check=False, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    out = tmp_path / "bt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "prbench", "train", "bt",
                          "--data", str(pairs), "--out", str(out), "--base-model", str(tiny_rm), "--max-steps", "2",
                          "--batch-size", "2", "--top-k", "2", "--max-length", "1024", "--device", "cpu", "--json"],
                         check=False, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    reports = [json.loads(chunk) for chunk in _json_objects(res.stdout)]
    assert len(reports) == 1  # rank 0 alone reports
    # 8 pairs, 2 per device per step: 2 steps are one epoch only if 2 ranks split the data (alone: 0.5)
    assert reports[0]["final"]["epoch"] == 1.0
    meta = json.loads((out / "prbench_rm.json").read_text())
    assert meta["train"]["pairs"] == 8 and (out / "model.safetensors").is_file()

    from prbench.rewards import load_rm

    assert load_rm(f"hf:{out}", device="cpu").spec.startswith("hf:")


def _json_objects(text: str) -> list[str]:
    """Split concatenated pretty-printed JSON objects (each rank prints one)."""
    dec, objs, i = json.JSONDecoder(), [], 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return objs
        obj, end = dec.raw_decode(text, i)
        objs.append(json.dumps(obj))
        i = end
