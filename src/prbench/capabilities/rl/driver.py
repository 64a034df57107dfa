"""RL with the RM as reward: fine-tune a policy on the RM's scores, then grade it on held-out items.

Why GRPO and not PPO: the paper trained with PPO in verl (actor lr 5e-7, critic lr 5e-6,
batch 128, one epoch, reward = RM score / 10, RM served over HTTP). The installed TRL (>= 1.13)
no longer has a `PPOTrainer`; its maintained on-policy trainer is `GRPOTrainer`, which needs
no critic: it samples `num_generations` answers per prompt and uses each answer's reward
relative to its group as the advantage. It answers the same question (does optimising this
RM's reward make answers fit the user's rubric better?) with a simpler, cheaper estimator;
results are comparable across RMs, not numerically to the paper's PPO. For PPO proper, run
verl or OpenRLHF against `prbench serve-reward` (docs/rl.md, `prbench.integrations`).

What the RM sees: each training row carries the item's `example_id`, `question` and `profile`
as dataset columns (plus `rubric_aspects` only under the `oracle` condition); the reward
function rebuilds a View per example through `prbench.context.conditions`, exactly as `prbench eval`
does. The narrative is never a column. The policy's prompt is the same as in Best-of-N
sampling (question + top-k profile posts, through conditions).

Invalid RM scores (NaN, failed calls) get the mean of the valid rewards in the same batch, so
they push the policy neither way (advantage about 0 within their group), and are counted.
GRPO normalises rewards within each group, so `reward_scale` (the paper's 1/10) only matters
with `scale_rewards="none"`; it is kept for parity.

After training, the policy (LoRA merged if used) is saved to `<out>/policy`, answers are
sampled on held-out items (`<out>/eval_samples`, and the untrained policy's in
`<out>/base_samples` for comparison), graded against each user's rubric, and written to
`<out>/downstream.json` (setting "rl", k = [1]: per item, the mean grade of its answers).

Devices: without a launcher, training uses one device (`device="cuda:N"` makes GPU N the only
visible one, `prbench.train.pin_device`, and `n_gpu` is pinned to 1, which TRL requires); under
`accelerate launch` / `torchrun` every rank trains and rank 0 alone saves, samples and grades.
Before grading, the trainer, policy and RM are released and the CUDA cache emptied, and the
grader is created only then: a `vllm:` grader wants most of the GPU free when it starts.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prbench.capabilities.rl.settings import RLSettings
from prbench.capabilities.sample.driver import sample_policy
from prbench.config import run_identity
from prbench.context.conditions import View, build_view, build_views, read_planner_file
from prbench.context.retrieval import Retriever, load_retriever
from prbench.downstream.grader import Grader, load_grader
from prbench.downstream.results import DownstreamResult, write_downstream
from prbench.downstream.sampling import SampleSet, load_items, policy_messages
from prbench.errors import PrbenchError
from prbench.evaluation.scoring import score_cached
from prbench.prompts import load_prompt
from prbench.rewards.base import DEFAULT_TOP_K, PointwiseRM, RewardModel, load_rm, shown_top_k
from prbench.runtime.extras import require
from prbench.schema import RubricAspect, SourceItem, posts_from_wire, posts_to_wire
from prbench.sources import resolve_policy
from prbench.stats import metrics
from prbench.store.cache import Cache, NullCache, content_key
from prbench.store.runs import write_json_atomic


def _trainable_config(transformers: Any, source: str) -> Any:
    """The model config minus a leftover GGUF `quantization_config` (weights already de-quantized).

    A folder converted from GGUF can keep that entry; transformers then treats the model as
    quantized and refuses full fine-tuning, although the saved weights are plain float tensors.
    """
    config = transformers.AutoConfig.from_pretrained(source)
    qc = getattr(config, "quantization_config", None)
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    if str(method).lower().endswith("gguf"):
        del config.quantization_config
    return config


def _completion_text(completion: Any) -> str:
    """TRL passes a string (standard format) or a list of messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict) and m.get("role") == "assistant")
    return str(completion)


@dataclass
class RewardStats:
    calls: int = 0
    scored: int = 0
    invalid: int = 0
    means: list[float] = field(default_factory=list)


class RMReward:
    """A TRL reward function over any pointwise RM; the View is rebuilt per row through conditions."""

    def __init__(
        self,
        rm: PointwiseRM,
        condition: str,
        *,
        retriever: Retriever,
        top_k: int = 10,
        planner: dict[str, list[RubricAspect]] | None = None,
        pool: Sequence[SourceItem] = (),
        seed: int = 0,
        max_context_chars: int | None = None,
        scale: float = 1.0,
        cache: Cache | None = None,
    ):
        self.rm: PointwiseRM | None = rm  # None once training is over and the RM released
        self.condition, self.retriever, self.top_k = condition, retriever, top_k
        self.planner, self.pool, self.seed, self.max_context_chars = planner, list(pool), seed, max_context_chars
        self.scale = scale
        self.cache = cache if cache is not None else NullCache()
        self.stats = RewardStats()
        self._views: dict[str, View] = {}
        self.__name__ = "prbench_rm_reward"  # TRL logs rewards under the function's name

    def view(self, example_id: str, question: str, profile: Sequence[dict] | None,
             rubric_aspects: Sequence[dict] | None) -> View:
        if example_id not in self._views:
            item = SourceItem(
                id=example_id, question=question, category="rl",
                profile=posts_from_wire(list(profile or [])),
                rubric_aspects=[RubricAspect(aspect=a["aspect"], reason=a.get("reason") or "")
                                for a in rubric_aspects or []],
            )
            self._views[example_id] = build_view(
                item, self.condition, retriever=self.retriever, top_k=self.top_k, planner=self.planner,
                pool=self.pool, seed=self.seed, max_context_chars=self.max_context_chars)
        return self._views[example_id]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], example_id: Sequence[str],
                 question: Sequence[str], profile: Sequence[Any] | None = None,
                 rubric_aspects: Sequence[Any] | None = None, **_: Any) -> list[float]:
        if self.rm is None:
            raise PrbenchError("this reward's RM was released after training; load it again to score")
        n = len(completions)
        views = [self.view(example_id[i], question[i], profile[i] if profile is not None else None,
                           rubric_aspects[i] if rubric_aspects is not None else None) for i in range(n)]
        scores = score_cached(self.rm, [(v, _completion_text(c)) for v, c in zip(views, completions)], self.cache)
        values = [s.value * self.scale if s.valid else math.nan for s in scores]
        valid = [v for v in values if math.isfinite(v)]
        fill = float(np.mean(valid)) if valid else 0.0
        self.stats.calls += 1
        self.stats.scored += n
        self.stats.invalid += n - len(valid)
        if valid:
            self.stats.means.append(fill)
        return [v if math.isfinite(v) else fill for v in values]


@dataclass
class RLResult:
    summary: dict[str, Any]
    result: DownstreamResult | None
    path: Path


def split_holdout(items: Sequence[SourceItem], fraction: float, seed: int) -> tuple[list[SourceItem], list[SourceItem]]:
    """Train / held-out by a seeded hash of the id: stable when items are added or reordered."""
    if not 0.0 < fraction < 1.0:
        raise PrbenchError(f"--holdout must be in (0, 1), got {fraction}")
    def u(it: SourceItem) -> float:
        return int(content_key(seed, it.id, "holdout")[:8], 16) / 16**8
    held = [it for it in items if u(it) < fraction]
    train = [it for it in items if u(it) >= fraction]
    if not held or not train:  # tiny sets: keep at least one of each, deterministically
        ordered = sorted(items, key=u)
        n_held = max(1, min(len(items) - 1, round(fraction * len(items))))
        held, train = ordered[:n_held], ordered[n_held:]
    return train, held


def _rows(items: Sequence[SourceItem], views: Sequence[View], condition: str, prompt: Any, max_words: int) -> list[dict]:
    rows = []
    for it, v in zip(items, views):
        row: dict[str, Any] = {
            "prompt": policy_messages(v, prompt, max_words),
            "example_id": it.id,
            "question": it.question,
            "profile": posts_to_wire(it.profile),
        }
        if condition == "oracle":
            row["rubric_aspects"] = [{"aspect": a.aspect, "reason": a.reason} for a in it.rubric_aspects]
        rows.append(row)
    return rows


def release_gpu_memory() -> None:
    """Collect dropped models and hand cached CUDA memory back, so a following engine can claim it."""
    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _grade_samples(ss: SampleSet, grader: Grader) -> dict[str, float]:
    """Per item: mean grade over its answers; items with an invalid grade are left out."""
    pairs = [(it, t) for it in ss.items for t in ss.samples[it.id]]
    grades = grader.grade(pairs)
    out, pos = {}, 0
    for it in ss.items:
        gs = grades[pos : pos + len(ss.samples[it.id])]
        pos += len(gs)
        if all(g.valid for g in gs):
            out[it.id] = float(np.mean([g.score for g in gs]))
    return out


def _step_reporter(transformers: Any, on_progress: Callable[[int, int], None]) -> Any:
    class StepReport(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            on_progress(state.global_step, state.max_steps)

    return StepReport()


def train_rl(
    policy: str,
    rm: str | RewardModel,
    data: str | Sequence[SourceItem],
    out: str | Path,
    *,
    settings: RLSettings | None = None,
    grader: str | Grader | None = None,
    eval_items: Sequence[SourceItem] | None = None,
    rm_options: dict[str, Any] | None = None,
    grader_options: dict[str, Any] | None = None,
    device: str = "auto",
    on_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> RLResult:
    """GRPO-train `policy` with `rm` as the reward, then grade it on held-out items.

    `settings` (or `options` on top of it) are `RLSettings`; `eval_items` are in-memory held-out
    items in place of `settings.eval_data`; `on_progress(step, steps)` follows training.
    """
    t0 = time.time()
    s = RLSettings.build(settings, **options)
    if s.policy_condition not in ("none", "profile"):
        raise PrbenchError("the policy sees 'profile' or 'none' (never the rubric)")
    if s.num_generations < 2:
        raise PrbenchError("GRPO needs --num-generations >= 2 (advantages are relative within a group)")
    torch = require("torch", "hf")
    transformers = require("transformers", "hf")
    trl = require("trl", "train")
    datasets = require("datasets", "hf")
    from prbench.train import end_ranks, is_main_process, pin_device, rank, single_process_args

    given_device, device = device, pin_device(device)
    rm_options = {**(rm_options or {})}
    if rm_options.get("device") == given_device:  # the same GPU under its new name
        rm_options["device"] = device
    grader_options = {**(grader_options or {})}
    eng = grader_options.get("engine_options")
    if isinstance(eng, dict) and eng.get("device") == given_device:
        grader_options["engine_options"] = {**eng, "device": device}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    items = (load_items(data, categories=s.categories, limit=s.limit, split=s.split) if isinstance(data, str)
             else list(data)[:s.limit])
    if eval_items is not None or s.eval_data is not None:
        train_items = items
        held = list(eval_items) if eval_items is not None else load_items(s.eval_data, split="test")
    else:
        train_items, held = split_holdout(items, s.holdout, s.seed)
    ret = load_retriever(s.retriever)
    planner = read_planner_file(s.planner_file) if s.planner_file else None
    prompt = load_prompt("policy_answer", s.prompt_file)
    policy_k = s.top_k or DEFAULT_TOP_K  # the policy prompt's posts; the RM's view follows eval's rule below
    policy_views = build_views(train_items, s.policy_condition, retriever=ret, top_k=policy_k, seed=s.seed)
    dataset = datasets.Dataset.from_list(_rows(train_items, policy_views, s.condition, prompt, s.max_words))

    source = resolve_policy(policy)  # before the RM loads: a missing policy fails at once
    rm_obj = rm if isinstance(rm, RewardModel) else load_rm(rm, **{"seed": s.seed, **rm_options})
    if not isinstance(rm_obj, PointwiseRM):
        raise PrbenchError(f"{rm_obj.spec}: RL needs a pointwise RM (a judge in --mode pointwise)")
    rm_name = getattr(rm_obj, "name", rm_obj.spec)
    pool = [it.model_copy(update={"narrative": ""}) for it in train_items]
    reward = RMReward(rm_obj, s.condition, retriever=ret, top_k=shown_top_k(s.top_k, rm_obj), planner=planner,
                      pool=pool, seed=s.seed, max_context_chars=s.max_context_chars, scale=s.reward_scale)

    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = transformers.AutoModelForCausalLM.from_pretrained(source, config=_trainable_config(transformers, source),
                                                              dtype=torch.float32)
    cfg = run_identity(s, exclude={"prompt_file"}, policy=policy, rm=rm_name, prompt_hash=prompt.hash,
                       data=data if isinstance(data, str) else "<in-memory>",
                       eval_data=s.eval_data if eval_items is None else "<in-memory>",
                       grader=grader if isinstance(grader, str) or grader is None else grader.spec)
    if is_main_process():  # a launched run's outputs are written once, by rank 0
        write_json_atomic(out / "config.json", cfg)

    args = trl.GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=s.steps, learning_rate=s.lr,
        per_device_train_batch_size=s.num_generations * s.prompts_per_step, num_generations=s.num_generations,
        max_completion_length=s.max_completion_length, temperature=s.temperature, top_p=s.top_p, beta=s.beta,
        logging_steps=1, save_strategy="no", report_to="none", seed=s.seed, use_cpu=not use_cuda, disable_tqdm=True,
        bf16=use_cuda and torch.cuda.is_bf16_supported(), disable_dropout=True,
        scale_rewards="group",
        **({} if s.gradient_checkpointing is None else {"gradient_checkpointing": s.gradient_checkpointing}),
    )
    single_process_args(args)
    peft_config = None
    if s.lora:
        peft = require("peft", "train")
        peft_config = peft.LoraConfig(r=s.lora_r, lora_alpha=2 * s.lora_r, lora_dropout=0.0,
                                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer, peft_config=peft_config,
                              callbacks=[_step_reporter(transformers, on_progress)] if on_progress else None)
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # it prints every log to stdout
    t_train = time.time()
    trainer.train()
    train_s = time.time() - t_train
    end_ranks()
    if not is_main_process():  # other ranks of a launched run: rank 0 saves, samples and grades
        return RLResult({"rank": rank(), "train_time_s": round(train_s, 3)}, None, out)
    trained = trainer.model
    if s.lora:
        trained = trained.merge_and_unload()
    policy_dir = out / "policy"
    trained.save_pretrained(policy_dir)
    tokenizer.padding_side = "right"
    tokenizer.save_pretrained(policy_dir)
    history = [{k: v for k, v in rec.items() if isinstance(v, (int, float))} for rec in trainer.state.log_history]
    del trainer, trained, model
    if not isinstance(rm, RewardModel):  # ours to release (a caller's RM object stays theirs)
        reward.rm = None
        del rm_obj
    release_gpu_memory()

    summary: dict[str, Any] = {
        "config": cfg, "train_items": len(train_items), "heldout_items": len(held),
        "reward": {"calls": reward.stats.calls, "scored": reward.stats.scored, "invalid": reward.stats.invalid,
                   "batch_means": reward.stats.means},
        "log_history": history, "train_time_s": round(train_s, 3), "policy_dir": str(policy_dir),
        "why_grpo": "installed TRL has no PPOTrainer; GRPO stands in (see module docstring)",
    }
    result = None
    if grader is not None:
        from prbench.engines.transformers_engine import TransformersEngine

        common: dict[str, Any] = {
            "n": s.eval_n, "condition": s.policy_condition, "top_k": policy_k, "retriever": s.retriever,
            "temperature": s.eval_temperature, "top_p": s.top_p if s.eval_temperature > 0 else 1.0,
            "max_new_tokens": s.eval_max_new_tokens, "max_words": s.max_words, "prompt_file": s.prompt_file,
            "seed": s.seed}
        trained_ss = sample_policy(TransformersEngine(str(policy_dir), device=device), held, out / "eval_samples",
                                   overwrite=True, **common)
        base_ss = sample_policy(TransformersEngine(source, device=device), held, out / "base_samples",
                                overwrite=True, **common) if s.compare_base else None
        release_gpu_memory()  # the sampling engines are gone before the grader (maybe vLLM) starts
        grader_obj = grader if isinstance(grader, Grader) else load_grader(
            grader, cache=Cache(namespace="grades"), **grader_options)
        per_item = _grade_samples(trained_ss, grader_obj)
        base_item: dict[str, float] = _grade_samples(base_ss, grader_obj) if base_ss is not None else {}
        if per_item:
            vals = np.array(list(per_item.values()))
            lo, hi = metrics.bootstrap_ci(vals, seed=s.seed, n_boot=s.n_boot)
            shared = sorted(set(per_item) & set(base_item))
            extra: dict[str, Any] = {
                "condition": s.condition, "policy": policy, "steps": s.steps, "heldout_items": len(held),
                "n_excluded": {"invalid_grade": len(held) - len(per_item)}, "eval_n": s.eval_n,
                "reward_invalid": reward.stats.invalid, "ci": "percentile bootstrap over items, 95%",
            }
            if base_item:
                diff = np.array([per_item[i] - base_item[i] for i in shared]) if shared else np.array([])
                extra["base"] = {"mean": float(np.mean(list(base_item.values()))), "n_items": len(base_item),
                                 "per_item": base_item}
                if diff.size:
                    dlo, dhi = metrics.bootstrap_ci(diff, seed=s.seed, n_boot=s.n_boot)
                    extra["gain_vs_base"] = {"mean": float(diff.mean()), "ci_low": dlo, "ci_high": dhi,
                                             "n_items": int(diff.size)}
            result = DownstreamResult(
                rm=rm_name, setting="rl", k=[1], first_k=[float(vals.mean())], expected=[float(vals.mean())],
                ci_low=[lo], ci_high=[hi], per_item={i: {"1": v} for i, v in per_item.items()},
                grader=grader_obj.spec, n_items=len(per_item), extra=extra)
            write_downstream(out, result)
        summary["grader"] = grader_obj.run_info()
        summary["eval"] = {"mean": result.expected[0] if result else None,
                           "n_items": result.n_items if result else 0,
                           "base_mean": (float(np.mean(list(base_item.values()))) if base_item else None)}
    summary["wall_time_s"] = round(time.time() - t0, 3)
    write_json_atomic(out / "summary.json", summary)
    return RLResult(summary, result, out)
