"""Training personalized reward models: one module per method (settings, trainer, `METHOD`), the method registry,
the seen/unseen-user protocol and the recommendation.

- `prbench.train.bt.train_bt`: fine-tunes any AutoModelForSequenceClassification folder with
  TRL's RewardTrainer on user views (condition none / profile / planner / oracle); saves a
  normal HF folder usable as `hf:<dir>` or `bt:<dir>`.
- `prbench.train.bt.train_context_bt`: a small BT head over a frozen sentence encoder that reads
  the same views; fast on CPU; saves a folder usable as `pal:<dir>` (arch `context-bt`).
- `prbench.train.pal.train_pal`: PAL-A / PAL-B; saves a folder usable as `pal:<dir>`.

Every trainer is seeded (same seed, same data -> same final loss) and writes `train_log.jsonl`
(one line per epoch: loss and pair accuracy, plus eval accuracy when eval pairs are given).
The plain-torch loop the frozen-encoder models share lives here.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prbench.errors import PrbenchError
from prbench.runtime.ranks import cuda_device, is_main_process, launched, rank  # noqa: F401  (their home before ranks.py)

LOG_FILE = "train_log.jsonl"
log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Where the model went and what the epochs looked like."""

    out: Path
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        return float(self.log[-1]["loss"]) if self.log else float("nan")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU) so a run is repeatable."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start_training(fn_name: str, pairs: Sequence[Any], seed: int, encoder: str, cache: Any) -> Any:
    """What each frozen-encoder method does first: refuse no pairs, seed everything, open the encoder."""
    from prbench.rewards.pal import Embedder

    if not pairs:
        raise PrbenchError(f"{fn_name}: no training pairs")
    seed_everything(seed)
    return Embedder(encoder, cache=cache)


def user_index(pairs: Sequence[Any]) -> tuple[list[str], dict[str, int]]:
    """The users of `pairs` in first-seen order, and each one's row."""
    from prbench.data.pairs import users_of

    users = users_of(pairs)
    return users, {u: i for i, u in enumerate(users)}


def write_log(out: Path, records: Sequence[dict[str, Any]]) -> None:
    """train_log.jsonl: one JSON object per epoch (rewritten whole, so a rerun never appends).

    Every trainer writes it last, so the folder is sealed here (`prbench.manifest`).
    """
    from prbench.manifest import seal

    out.mkdir(parents=True, exist_ok=True)
    with (out / LOG_FILE).open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    seal(out)


def read_log(out: str | Path) -> list[dict[str, Any]]:
    path = Path(out) / LOG_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pair_accuracy(margins) -> float:
    """Share of pairs with chosen scored above rejected; exact ties count one half."""
    import torch

    m = torch.as_tensor(margins)
    if m.numel() == 0:
        return float("nan")
    return float(((m > 0).double() + 0.5 * (m == 0).double()).mean())


def fit_pairwise(
    margin_fn: Callable[[Any], Any],
    param_groups: list[dict[str, Any]],
    n_pairs: int,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    weight_decay: float = 0.0,
    eval_fn: Callable[[], dict[str, float]] | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Bradley-Terry training: minimise -log sigmoid(margin) over shuffled minibatches.

    `margin_fn(idx)` returns score(chosen) - score(rejected) for pair indices `idx`. The
    shuffle uses its own seeded generator, so results do not depend on global RNG state.
    Returns one record per epoch: mean loss and pair accuracy during the epoch, plus `eval_fn()`.
    """
    from prbench.rewards.pal import torch_threads

    with torch_threads():
        return _fit(margin_fn, param_groups, n_pairs, epochs=epochs, batch_size=batch_size, seed=seed,
                    weight_decay=weight_decay, eval_fn=eval_fn, on_epoch=on_epoch)


def _fit(margin_fn, param_groups, n_pairs, *, epochs, batch_size, seed, weight_decay, eval_fn, on_epoch):
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(param_groups, weight_decay=weight_decay)
    log: list[dict[str, Any]] = []
    for epoch in range(1, epochs + 1):
        order = torch.randperm(n_pairs, generator=gen)
        total, margins = 0.0, []
        for start in range(0, n_pairs, batch_size):
            idx = order[start : start + batch_size]
            margin = margin_fn(idx)
            loss = -torch.nn.functional.logsigmoid(margin).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            margins.append(margin.detach())
        rec: dict[str, Any] = {"epoch": epoch, "loss": total / max(n_pairs, 1),
                               "accuracy": pair_accuracy(torch.cat(margins)) if margins else float("nan")}
        if eval_fn is not None:
            rec.update(eval_fn())
        log.append(rec)
        if on_epoch is not None:
            on_epoch(rec)
    return log


# --------------------------------------------------------------------------- devices
# TRL's GRPOTrainer, RewardTrainer and SFTTrainer refuse `n_gpu > 1`, which transformers sets from
# `torch.cuda.device_count()` when no launcher is used. Without a launcher a trainer therefore gets
# exactly one GPU: the one `--device cuda:N` names, made the only visible one while CUDA is not yet
# initialised, and `n_gpu` pinned to 1 either way. Many GPUs: `accelerate launch` / `torchrun`, one
# process per GPU (docs/rl.md); then every rank trains and only rank 0 writes the results.


def end_ranks() -> None:
    """After a launched run's training: every rank leaves the process group together.

    Then ranks other than 0 can exit at once (a rank leaving a live gloo/NCCL group aborts with
    "terminate called", and torch elastic then kills rank 0 while it saves) and rank 0 saves,
    samples and grades alone. A no-op without a process group.
    """
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def pin_device(device: str | None) -> str:
    """The device a single-process trainer should use; `cuda:N` becomes the only visible GPU.

    `cpu` stays `cpu`; under a launcher the launcher decides (`auto`); `auto` / `cuda` keep every
    GPU visible and train on the first (`single_process_args` pins `n_gpu` to 1). `cuda:N` sets
    CUDA_VISIBLE_DEVICES to that one GPU and returns `cuda:0`, which is then the chosen GPU for
    everything in this process (the RM too). That only works before CUDA starts in this process
    (the CLI calls this first): otherwise it is an error naming the fix, never the wrong GPU.
    """
    device = (device or "auto").strip()
    if launched():
        return "cpu" if device == "cpu" else "auto"
    if not device.startswith("cuda:"):
        return device
    try:
        index = int(device.split(":", 1)[1])
    except ValueError:
        raise PrbenchError(f"--device {device!r}: expected cuda:N") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
    if ids is not None and index >= len(ids):
        raise PrbenchError(f"--device {device}: CUDA_VISIBLE_DEVICES={visible} names {len(ids)} device(s)")
    import torch

    if torch.cuda.is_initialized() or (ids is not None and len(ids) == 1):
        if index == 0 and torch.cuda.is_available() and torch.cuda.device_count() == 1:
            return "cuda:0"
        if torch.cuda.is_initialized():
            raise PrbenchError(f"--device {device}: CUDA already started in this process with several GPUs "
                               f"visible; start it with CUDA_VISIBLE_DEVICES={index} instead")
    chosen = ids[index] if ids is not None else str(index)
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    if not torch.cuda.is_available():
        raise PrbenchError(f"--device {device}: no CUDA device {chosen} is available")
    if torch._C._cuda_getDeviceCount() != 1:  # the runtime enumerated devices before we narrowed them
        raise PrbenchError(f"--device {device}: CUDA devices were enumerated before prbench could select one; "
                           f"start the command with CUDA_VISIBLE_DEVICES={chosen}")
    log.info("training on GPU %s only (CUDA_VISIBLE_DEVICES=%s); use accelerate launch for several", chosen, chosen)
    return "cuda:0"


def single_process_args(args: Any) -> Any:
    """Pin a TrainingArguments object to one device when no launcher runs (never nn.DataParallel)."""
    if not launched() and getattr(args, "n_gpu", 0) > 1:
        args._n_gpu = 1
    return args
