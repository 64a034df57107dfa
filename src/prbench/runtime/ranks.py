"""Which process of a launched run this is (`accelerate launch` / `torchrun`), read from the environment.

A module of its own, below engines, rewards and training alike, because each places models by it.
"""

from __future__ import annotations

import os


def launched() -> bool:
    """True inside `accelerate launch` / `torchrun` (one process per device)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 or "LOCAL_RANK" in os.environ


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def cuda_device() -> str:
    """`cuda` for this process, read when a model loads (after the launcher set LOCAL_RANK).

    Without a launcher: `cuda` (the current device). Under one: the rank's own GPU,
    `cuda:LOCAL_RANK`, as accelerate places the policy; `cuda:0` where the launcher left each
    rank one visible GPU. A bare `cuda` would put every rank's RM on GPU 0.
    """
    local = os.environ.get("LOCAL_RANK")
    if not launched() or local is None:
        return "cuda"
    import torch

    return "cuda:0" if torch.cuda.device_count() == 1 else f"cuda:{int(local)}"
