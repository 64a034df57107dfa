"""Bradley-Terry reward models that see the user: two trainers, one view-building path.

Both build each pair's RM input with `conditions.build_view` (the only place profile or rubric
becomes RM input), so a model is trained on exactly what it will be evaluated on.

- `train_bt` (the real thing): fine-tunes any AutoModelForSequenceClassification-capable folder
  with TRL's RewardTrainer on conversational pairs [user: View.prompt(), assistant: response];
  optional LoRA (merged before saving); saves a normal HF folder (safetensors + tokenizer +
  `prbench_rm.json` with the condition) usable as `hf:<dir>` / `bt:<dir>`. On CPU in tests it
  only runs a few steps on a tiny random model: it proves the plumbing, not that it learns.
- `train_context_bt` (the fast proxy): a small BT head over a frozen sentence encoder (see
  `prbench.rewards.pal`, arch `context-bt`) reading the same views item by item. This is what
  the acceptance tests use to show that reading the profile beats chance on planted
  preferences; it is not a fine-tuned LLM RM. Loads as `pal:<dir>`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.config import ENCODER_FIELD, ContextSpec, MethodView, count, field_of, opt
from prbench.context.conditions import TRAINABLE_CONDITIONS, View, pair_views  # noqa: F401  (pair_views: its old home)
from prbench.data.pairs import PreferencePair
from prbench.errors import PrbenchError
from prbench.rewards.pal import (
    Embedder,
    build_model,
    context_items,
    pad_contexts,
    save_folder,
)
from prbench.runtime.extras import require
from prbench.schema import RubricAspect
from prbench.store.cache import Cache
from prbench.train import (
    TrainResult,
    end_ranks,
    fit_pairwise,
    is_main_process,
    pair_accuracy,
    pin_device,
    single_process_args,
    start_training,
    write_log,
)
from prbench.train.methods import Method
from prbench.version import __version__

# Used only when the base tokenizer has none; saved with the tokenizer so scoring uses it too.
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n{% endfor %}"
)


class ContextBTConfig(MethodView):
    """The frozen-encoder BT head (arch `context-bt`): question, response and context items over MiniLM."""

    max_context_chars: int | None = count(None, "Character budget for the user context.", 10**9)
    dim: int = count(128, "Width of the head.", 1 << 16)
    hidden: int = count(64, "Hidden units.", 1 << 16)
    epochs: int = count(20, "Training epochs.", 100_000)
    lr: float = opt(1e-3, "Learning rate.", gt=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(0.0, "Weight decay.", ge=0)
    encoder: str = ENCODER_FIELD


class BTConfig(MethodView):
    """TRL RewardTrainer fine-tuning of a sequence classifier (`prbench train bt --base-model`, `train_bt`);
    everything not here keeps TRL's defaults."""

    max_context_chars: int | None = field_of(ContextSpec, "max_context_chars")
    epochs: float = opt(1.0, "Training epochs.", gt=0)
    lr: float = opt(5e-5, "Learning rate.", gt=0)
    batch_size: int = count(8, "Pairs per optimisation step.", 1 << 20)
    grad_accum: int = count(1, "Gradient accumulation steps.", 4096)
    max_length: int | None = count(2048, "Token limit per input; longer pairs are an error.", 1 << 20)
    max_steps: int = count(-1, "Stop after this many steps (-1: run all epochs).", 10**9, lo=-1)
    lora: bool = opt(False, "Train LoRA adapters (merged into the saved model).")
    lora_r: int = count(8, "LoRA rank.", 4096)
    lora_alpha: int = count(16, "LoRA alpha.", 1 << 16)
    lora_dropout: float = opt(0.0, "LoRA dropout.", ge=0, lt=1)
    lora_target: str = opt("all-linear", "Modules LoRA adapts (PEFT's target_modules).", metavar="NAMES")
    gradient_checkpointing: bool = opt(False, "Trade compute for memory.")
    bf16: bool | None = opt(None, "bfloat16 training (default: only on a bf16-capable GPU).")
    device: str = opt("auto", "auto, cpu or cuda:N (the only GPU this process then sees; many GPUs: accelerate "
                              "launch).", metavar="DEVICE")


def _view_options(cfg: Any, planner: Any, cache: Cache | None) -> dict[str, Any]:
    return {"retriever": cfg.retriever, "top_k": cfg.top_k, "planner": planner, "seed": cfg.seed,
            "max_context_chars": cfg.max_context_chars, "cache": cache}


# --------------------------------------------------------------------------- context BT head


class _ViewBatch:
    """Embedded (question, chosen, rejected, context items) of a list of pairs and their views."""

    def __init__(self, embed: Embedder, pairs: Sequence[PreferencePair], views: Sequence[View]):
        import torch

        self.q = torch.from_numpy(embed([v.question for v in views]))
        self.c = torch.from_numpy(embed([p.chosen for p in pairs]))
        self.r = torch.from_numpy(embed([p.rejected for p in pairs]))
        items = [context_items(v) for v in views]
        texts = list(dict.fromkeys(t for it in items for t in it))
        pos = {t: i for i, t in enumerate(texts)}
        self.table = torch.from_numpy(embed(texts)) if texts else torch.zeros(1, self.q.shape[1])
        self.idx, self.mask = pad_contexts([[pos[t] for t in it] for it in items])

    def margin(self, model, idx=None):
        sl = slice(None) if idx is None else idx
        ctx = self.table[self.idx[sl]]
        mask = self.mask[sl]
        return model(self.q[sl], self.c[sl], ctx, mask) - model(self.q[sl], self.r[sl], ctx, mask)


def train_context_bt(
    pairs: Sequence[PreferencePair],
    out: str | Path,
    config: ContextBTConfig | None = None,
    *,
    eval_pairs: Sequence[PreferencePair] = (),
    planner: Mapping[str, Sequence[RubricAspect]] | None = None,
    cache: Cache | None = None,
) -> TrainResult:
    """Train the frozen-encoder BT head on user views; logs per epoch; saves a `pal:` folder."""
    import torch

    cfg = config or ContextBTConfig()
    embed = start_training("train_context_bt", pairs, cfg.seed, cfg.encoder, cache)
    view_kw = _view_options(cfg, planner, cache)
    train = _ViewBatch(embed, pairs, pair_views(pairs, cfg.condition, **view_kw))
    model_cfg: dict[str, Any] = {"arch": "context-bt", "encoder": cfg.encoder, "embed_dim": int(train.q.shape[1]),
                                 "hidden": cfg.hidden, "dim": cfg.dim}
    model = build_model(model_cfg)

    eval_fn = None
    if eval_pairs:
        held = _ViewBatch(embed, eval_pairs, pair_views(eval_pairs, cfg.condition, **view_kw))

        def eval_fn() -> dict[str, float]:
            model.eval()
            with torch.no_grad():
                acc = pair_accuracy(held.margin(model))
            model.train()
            return {"eval_accuracy": acc}

    model.train()
    log = fit_pairwise(lambda idx: train.margin(model, idx), [{"params": list(model.parameters()), "lr": cfg.lr}],
                       len(pairs), epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed,
                       weight_decay=cfg.weight_decay, eval_fn=eval_fn)
    model.eval()
    model_cfg.update({"condition": cfg.condition, "retriever": cfg.retriever, "top_k": cfg.top_k,
                      "train_users": list(dict.fromkeys(p.user_id for p in pairs)),
                      "train": {**cfg.model_dump(), "pairs": len(pairs), "prbench": __version__}})
    out = save_folder(out, model_cfg, model)
    write_log(out, log)
    return TrainResult(out, log)


# --------------------------------------------------------------------------- TRL RewardTrainer


def conversational_rows(pairs: Sequence[PreferencePair], views: Sequence[View]) -> dict[str, list]:
    """TRL's conversational preference format with an explicit prompt (the user turn is the view)."""
    return {
        "prompt": [[{"role": "user", "content": v.prompt()}] for v in views],
        "chosen": [[{"role": "assistant", "content": p.chosen}] for p in pairs],
        "rejected": [[{"role": "assistant", "content": p.rejected}] for p in pairs],
    }


def _epoch_logger(records: list[dict[str, Any]]):
    transformers = require("transformers", "hf")

    callback_base: Any = transformers.TrainerCallback  # transformers is imported lazily: mypy takes it as Any

    class EpochLog(callback_base):
        """Collects TRL's per-epoch logs (train loss/accuracy, eval accuracy) into one record per epoch."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "train_runtime" in logs:
                return
            epoch = round(float(logs.get("epoch", state.epoch or 0)), 4)
            rec = next((r for r in records if r["epoch"] == epoch), None)
            if rec is None:
                rec = {"epoch": epoch}
                records.append(rec)
            for key in ("loss", "accuracy", "margin", "eval_loss", "eval_accuracy"):
                if key in logs:
                    rec[key] = float(logs[key])

    return EpochLog()


def train_bt(
    pairs: Sequence[PreferencePair],
    out: str | Path,
    base_model: str,
    config: BTConfig | None = None,
    *,
    eval_pairs: Sequence[PreferencePair] = (),
    planner: Mapping[str, Sequence[RubricAspect]] | None = None,
    cache: Cache | None = None,
) -> TrainResult:
    """Fine-tune `base_model` (a local folder or hub id) as a user-conditioned BT reward model."""
    torch = require("torch", "hf")
    transformers = require("transformers", "hf")
    trl = require("trl", "train")
    datasets = require("datasets", "train")
    cfg = config or BTConfig()
    device = pin_device(cfg.device)
    if not pairs:
        raise PrbenchError("train_bt: no training pairs")
    out = Path(out)
    view_kw = _view_options(cfg, planner, cache)
    train_ds = datasets.Dataset.from_dict(conversational_rows(pairs, pair_views(pairs, cfg.condition, **view_kw)))
    eval_ds = None
    if eval_pairs:
        eval_ds = datasets.Dataset.from_dict(
            conversational_rows(eval_pairs, pair_views(eval_pairs, cfg.condition, **view_kw)))

    tokenizer = transformers.AutoTokenizer.from_pretrained(base_model)
    added_template = tokenizer.chat_template is None
    if added_template:
        tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token

    peft_config = None
    if cfg.lora:
        peft = require("peft", "train")
        peft_config = peft.LoraConfig(task_type="SEQ_CLS", r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                      lora_dropout=cfg.lora_dropout, target_modules=cfg.lora_target)
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    bf16 = cfg.bf16 if cfg.bf16 is not None else bool(cuda and torch.cuda.is_bf16_supported())
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prbench-trl-") as scratch:
        args = trl.RewardConfig(
            output_dir=scratch, num_train_epochs=cfg.epochs, max_steps=cfg.max_steps, learning_rate=cfg.lr,
            per_device_train_batch_size=cfg.batch_size, per_device_eval_batch_size=cfg.batch_size,
            gradient_accumulation_steps=cfg.grad_accum, seed=cfg.seed, data_seed=cfg.seed,
            logging_strategy="epoch", eval_strategy="epoch" if eval_ds is not None else "no",
            save_strategy="no", report_to="none", disable_tqdm=True, bf16=bf16, use_cpu=not cuda,
            gradient_checkpointing=cfg.gradient_checkpointing, max_length=cfg.max_length,
        )
        single_process_args(args)
        trainer = trl.RewardTrainer(model=base_model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                                    processing_class=tokenizer, peft_config=peft_config,
                                    callbacks=[_epoch_logger(records)])
        trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # our log replaces its prints
        if len(trainer.train_dataset) < len(pairs):
            dropped = len(pairs) - len(trainer.train_dataset)
            raise PrbenchError(f"{dropped} of {len(pairs)} training pairs exceed max_length={cfg.max_length} "
                               "tokens; raise --max-length or shorten the context (--top-k)")
        trainer.train()
        model = trainer.model
    end_ranks()
    if not is_main_process():  # a launched run's other ranks: rank 0 writes the model
        return TrainResult(out, records)
    if cfg.lora:
        model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "kind": "bt", "loads_as": "hf:<dir> or bt:<dir>", "condition": cfg.condition, "base_model": base_model,
        "chat_template_added": added_template, "train": {**cfg.model_dump(), "pairs": len(pairs)},
        "versions": {"prbench": __version__, "trl": trl.__version__, "transformers": transformers.__version__},
    }
    (out / "prbench_rm.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    write_log(out, records)
    return TrainResult(out, records)


METHOD = Method("context-bt", train_context_bt, ContextBTConfig, "pal", cost=2, command=False)
