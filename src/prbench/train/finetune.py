"""User-conditioned fine-tuning: a sequence-classifier RM trained end to end on (user context + response).

This is `prbench.train.bt.train_bt` (TRL's RewardTrainer on the views a condition builds)
with defaults that fit the two model families it is meant for:
- small encoders (default `builtin:minilm-l6`, all-MiniLM-L6-v2 with a fresh one-logit head):
  full fine-tuning, one epoch, `max_length` 512 (the model's position limit), top 4 posts so context,
  question and response fit;
- decoder RMs (any causal LM folder, e.g. `builtin:smollm2` or a tiny random model): LoRA
  (merged before saving), `max_length` 1024.
`lora=None` picks by architecture. The folder is a plain HF folder (`hf:<dir>` / `bt:<dir>`);
`prbench_rm.json` also lists the training users, so an eval can split seen from unseen users.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from prbench.config import ENCODER, MethodView, count, opt
from prbench.data.pairs import PreferencePair, users_of
from prbench.errors import PrbenchError
from prbench.store.cache import Cache
from prbench.train import TrainResult, is_main_process
from prbench.train.methods import Method


class FinetuneConfig(MethodView):
    """A user-conditioned sequence classifier fine-tuned with TRL on context + response."""

    base_model: str = opt(ENCODER, "builtin:minilm-l6 (encoder), builtin:smollm2 (decoder) or a local model folder.",
                          metavar="SPEC")
    # None: the default depends on the base model (4 encoders, 10 decoders); wider than MethodView's, as above
    top_k: int | None = count(  # type: ignore[assignment]  # wider than MethodView's int: None is resolved per base model
        None, "Profile posts shown (default 4 encoders, 10 decoders).", 10_000)
    epochs: float = opt(1.0, "Training epochs (2 took 981 s on 400 pairs on a loaded 2-core CPU).", gt=0)
    lr: float | None = opt(None, "Learning rate (default 5e-5 full fine-tuning, 2e-4 LoRA).", gt=0)
    batch_size: int = count(8, "Pairs per optimisation step.", 1 << 20)
    max_length: int | None = count(None, "Token limit (default 512 encoders, 1024 decoders).", 1 << 20)
    lora: bool | None = opt(None, "LoRA (default: for decoders only).")
    lora_r: int = count(8, "LoRA rank.", 4096)
    max_steps: int = count(-1, "Stop after this many steps (-1: run all epochs).", 10**9, lo=-1)


def resolve_base(name: str) -> str:
    """`builtin:<name>` -> the packaged folder (MiniLM) or the converted one (SmolLM2); else unchanged."""
    if not name.startswith("builtin:"):
        return name
    from prbench.engines.builtin import MINILM, builtin_path, convert_smollm2

    which = name.split(":", 1)[1]
    return str(builtin_path(MINILM) if which == MINILM else convert_smollm2())


def is_decoder(path: str) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise PrbenchError(f"finetune: {path} has no config.json (give a local model folder or builtin:NAME)")
    data = json.loads(cfg.read_text(encoding="utf-8"))
    archs = " ".join(data.get("architectures") or [])
    return "CausalLM" in archs or bool(data.get("is_decoder")) or data.get("model_type") in (
        "llama", "qwen2", "mistral", "gpt2", "gemma", "phi3")


def train_finetune(pairs: Sequence[PreferencePair], out: str | Path, config: FinetuneConfig | None = None, *,
                   cache: Cache | None = None) -> TrainResult:
    from prbench.train.bt import BTConfig, train_bt

    cfg = config or FinetuneConfig()
    base = resolve_base(cfg.base_model)
    decoder = is_decoder(base)
    lora = decoder if cfg.lora is None else cfg.lora
    bt = BTConfig(condition=cfg.condition, retriever=cfg.retriever, top_k=cfg.top_k or (10 if decoder else 4),
                  epochs=cfg.epochs, lr=cfg.lr or (2e-4 if lora else 5e-5), batch_size=cfg.batch_size,
                  seed=cfg.seed, max_length=cfg.max_length or (1024 if decoder else 512), max_steps=cfg.max_steps,
                  lora=lora, lora_r=cfg.lora_r)
    result = train_bt(pairs, out, base, bt, cache=cache)
    if not is_main_process():  # a launched run's other ranks: rank 0 wrote the model
        return result
    meta_path = Path(result.out) / "prbench_rm.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta.update({"kind": "finetune", "loads_as": "finetune:<dir>", "base_spec": cfg.base_model, "family":
                 "decoder" if decoder else "encoder", "users": users_of(pairs), "top_k": bt.top_k})
    meta_path.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    from prbench.manifest import seal

    seal(result.out)  # the meta changed after train_bt sealed the folder
    return result


METHOD = Method("finetune", train_finetune, FinetuneConfig, "finetune",
                "Fine-tune a user-conditioned RM. TRL sequence classifier on context + response; finetune:OUT.",
                refit=False, cost=30)
