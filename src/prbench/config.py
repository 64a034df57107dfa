"""Driver settings: one pydantic model per driver, composed of shared parts.

The Python API validates its keywords with these models, the CLI builds its options from their
fields (`prbench.cli.options.settings_command`) and the study's stage sections are the same
models, so every option has one name, one type, one range and one default everywhere.

Parts: `DataSpec` (what to read), `ContextSpec` (what the RM sees of the user), `PolicyPromptSpec`
(what the policy sees), `GuidanceSpec` (how an RM steers a policy). A field's `description` is
its help text; `json_schema_extra={"cli": [...]}` names extra flags.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prbench.context.conditions import ALL_CONDITIONS, CONDITIONS
from prbench.errors import PrbenchError
from prbench.schema import one_of


def opt(default: Any, help: str, *flags: str, metavar: str | None = None, **constraints: Any) -> Any:
    """A settings field with its help text, extra CLI flags and metavar."""
    extra: dict[str, Any] = {}
    if flags:
        extra["cli"] = list(flags)
    if metavar:
        extra["metavar"] = metavar
    return Field(default, description=help, json_schema_extra=extra or None, **constraints)


MAX_ITEMS = 10**9  # more items than any benchmark holds: a larger limit is a typo (or 1e38)


def count(default: Any, help: str, hi: int, *flags: str, lo: int = 1) -> Any:
    """A strict whole number in [lo, hi]: `5.0`, `"5"`, `true` and out-of-range values are refused."""
    return opt(default, help, *flags, metavar="N", strict=True, ge=lo, le=hi)


def field_of(model: type[BaseModel], name: str) -> Any:
    """`model`'s field `name` (default, help, bounds) to declare again in another settings class."""
    return model.model_fields[name]


class Settings(BaseModel):
    """Strict: an unknown key is an error naming the closest known one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("encoder", mode="before", check_fields=False)
    @classmethod
    def _none_word(cls, v: Any) -> Any:
        return None if v == "none" else v  # the command line's way of saying "no encoder"

    @classmethod
    def build(cls, base: Settings | None = None, **given: Any) -> Any:
        """`base` (or the defaults) with `given` keywords on top, validated; one clear line on a bad key."""
        known = set(cls.model_fields)
        for key in given:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise PrbenchError(f"{cls.__name__}: unknown option {key!r}{hint}")
        values = {**(base.model_dump() if base is not None else {}), **given}
        try:
            return cls(**values)
        except ValidationError as e:
            err = e.errors()[0]
            if err["type"] == "value_error":  # our validators' messages name the field themselves
                raise PrbenchError(err["msg"].removeprefix("Value error, ")) from None
            raise PrbenchError(f"{cls.__name__}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def run_identity(settings: Settings, *, exclude: set[str], **facts: Any) -> dict[str, Any]:
    """A run folder's config.json: the settings that decide its results, plus facts such as fingerprints."""
    return {**facts, **settings.model_dump(exclude=exclude | set(facts))}


class DataSpec(Settings):
    split: str = opt("test", "Split to read: of a hub dataset, or the rows of a local file that name a `split`.")
    categories: list[str] | None = opt(None, "Categories to keep, comma-separated (e.g. arts,society).",
                                       metavar="LIST")
    limit: int | None = count(None, "Keep at most N items.", MAX_ITEMS)

    @field_validator("limit", mode="before")
    @classmethod
    def _whole_limit(cls, v: Any) -> Any:
        """`--limit 0` and a study's `limit: 0` agree: an error (a 0-item "finished" run never happens)."""
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"limit must be a whole number >= 1 (or unset for every item), got {v!r}")
        return v


class ContextSpec(Settings):
    condition: str = opt("none", "What the RM sees: none, profile, planner, oracle, wrong-profile.", "-c",
                         metavar="NAME")
    # None (where a driver allows it): each RM's own number, resolved by `prbench.rewards.base.view_top_k`
    top_k: int | None = count(10, "Profile posts kept after retrieval.", 10_000)
    retriever: str = opt("bm25", "bm25, dense:MODEL or contriever:MODEL.", metavar="SPEC")
    max_context_chars: int | None = count(None, "Character budget for the user context.", 10**9)
    planner_file: str | None = opt(None, "Planner output (JSONL) for the planner condition.", metavar="PATH")

    conditions: ClassVar[tuple[str, ...]] = CONDITIONS  # what this driver's `condition` may be

    @field_validator("condition")
    @classmethod
    def _known_condition(cls, v: str) -> str:
        return one_of(v, cls.conditions, "condition")


class PolicyPromptSpec(Settings):
    policy_condition: str = opt(
        "profile", "What the policy sees: profile (top-k posts), none or wrong-profile.", metavar="NAME")
    max_words: int = count(100, "Word limit stated in the policy prompt.", 100_000)
    prompt_file: str | None = opt(None, "Your own policy prompt ({{user_prompt}}, {{max_words}}).", metavar="PATH")


class GuidanceSpec(Settings):
    w: float = opt(1.0, "Reward weight; 0 = the plain policy.", ge=-1e6, le=1e6)
    k: int = count(10, "Policy top-k candidates per decision point.", 4096)
    reward_norm: Literal["none", "zscore"] = opt("none", "none (raw RM units, ARGS) or zscore (per decision point).",
                                                 metavar="NAME")
    rm_batch_size: int = count(64, "Texts per RM call (prefix rewards).", 10**7)


class RunSpec(Settings):
    seed: int = count(0, "Seed for every random choice (derived per example).", 2**63 - 1, lo=0)
    n_boot: int = count(1000, "Bootstrap resamples for confidence intervals.", 10**6)


class DecodingSpec(Settings):
    """How the reward-guided policy decodes (RGD)."""

    chunk: int = count(1, "Tokens between RM decision points (greedy in between).", 4096)
    max_new_tokens: int = count(128, "Token cap per answer.", 65536)
    temperature: float = opt(0.0, "0 = greedy on guided scores; > 0 samples them.", ge=0)
    repetition_penalty: float | None = opt(None, "Repetition penalty on the policy's logits (default: the "
                                                 "engine's own).", gt=0)


class PolicyScoringSpec(Settings):
    """How the reward-guided policy scores a given response (policy accuracy)."""

    mode: Literal["full", "topk"] = opt("full", "full (mass-preserving; w=0 = plain policy) or topk (softmax over "
                                                "top-k and the token).", metavar="NAME")
    repetition_penalty: float = opt(1.0, "Repetition penalty under teacher forcing (1.0 = the model's own "
                                         "likelihood).", gt=0)


class RGDSettings(DataSpec, ContextSpec, PolicyPromptSpec, GuidanceSpec, DecodingSpec, RunSpec):
    """Reward-guided decoding (`prbench rgd`, `run_rgd`, the study's `rgd` section)."""

    top_k: int = field_of(ContextSpec, "top_k")  # the policy's prompt and the RM's view alike: a number
    batch_size: int = count(8, "Items decoded together.", 65536)
    downstream_metric: Literal["auto", "grade", "rouge1", "rougeL", "embedding", "none"] = opt(
        "auto", "downstream.json value: auto, grade, rouge1, rougeL, embedding or none.", metavar="NAME")
    encoder: str | None = opt("builtin:minilm-l6", "Sentence encoder for gold embedding similarity (none: skip).",
                              metavar="SPEC")


class PolicyAccuracySettings(DataSpec, ContextSpec, PolicyPromptSpec, GuidanceSpec, PolicyScoringSpec, RunSpec):
    """Policy accuracy (`prbench policy-accuracy`, `policy_accuracy`, the study's section)."""

    top_k: int = field_of(ContextSpec, "top_k")  # the policy's prompt and the RM's view alike: a number
    batch_size: int = count(4, "Responses per policy forward pass.", 65536)


class ICLSettings(DataSpec, RunSpec):
    """The in-context-learning baseline (`prbench icl`, `run_icl`)."""

    examples: Literal["auto", "qa", "posts"] = opt(
        "auto", "auto, qa (the user's past Q/A pairs) or posts (top-k profile posts).", metavar="NAME")
    max_examples: int = count(3, "Past Q/A pairs shown (qa).", 4096)
    with_posts: bool = opt(False, "qa: also show the top-k posts before the question.")
    max_new_tokens: int = count(128, "Token cap per answer.", 65536)
    temperature: float = opt(0.0, "0 = greedy.", ge=0)
    top_p: float = opt(1.0, "Nucleus mass when sampling.", gt=0, le=1)
    repetition_penalty: float | None = opt(None, "Repetition penalty (default: the engine's own).", gt=0)
    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    max_words: int = field_of(PolicyPromptSpec, "max_words")
    prompt_file: str | None = field_of(PolicyPromptSpec, "prompt_file")
    batch_size: int = count(8, "Items generated together.", 65536)
    encoder: str | None = opt("builtin:minilm-l6", "Sentence encoder for gold embedding similarity (none: skip).",
                              metavar="SPEC")


# Fields of eval's settings (`prbench.capabilities.eval.settings.EvalSettings`) that other drivers scoring with an
# RM declare too: one default, range and help text each
RM_TOP_K: Any = count(None, "Profile posts kept after retrieval (default: the number a trained model's folder "
                            "asks for, e.g. stance's whole profile of judgments; else 10).", 10_000)
RM_BATCH_SIZE: Any = count(16, "Examples per model batch.", 65536)


class BonSettings(ContextSpec, RunSpec):
    """Best-of-N curves of RMs on a samples folder (`best_of_n`, `prbench bon`, the study's `bon`)."""

    ks: list[int] | None = opt(None, "Comma-separated k values (default 1,2,4,...,N).", "--k", metavar="LIST")
    batch_size: int = RM_BATCH_SIZE
    top_k: int | None = RM_TOP_K  # None: each RM's own, as eval


class RLSettings(DataSpec, ContextSpec, PolicyPromptSpec, RunSpec):
    """GRPO with an RM as the reward, then held-out grading (`prbench rl`, `train_rl`, the study's `rl`)."""

    conditions: ClassVar[tuple[str, ...]] = tuple(c for c in CONDITIONS if c != "wrong-profile")
    split: str = opt("train", "Split to train on: of a hub dataset, or the rows of a local file that name a "
                              "`split`.")
    top_k: int | None = count(
        None, "Profile posts kept after retrieval (default: for the RM, the number its trained folder asks for, "
              "e.g. stance's whole profile, as eval; else 10; the policy prompt shows 10).", 10_000)
    condition: str = opt("profile", "What the RM sees: none, profile, planner, oracle.", "-c", metavar="NAME")
    steps: int = count(50, "Optimizer steps.", 10**6)
    lr: float = opt(1e-6, "Learning rate.", gt=0)
    lora: bool = opt(False, "Train a LoRA adapter (merged afterwards).")
    lora_r: int = count(16, "LoRA rank.", 4096)
    num_generations: int = count(4, "Answers per prompt (GRPO group size, at least 2).", 1024)
    prompts_per_step: int = count(2, "Prompts per optimizer step.", 4096)
    max_completion_length: int = count(160, "Token cap per training answer.", 65536)
    temperature: float = opt(1.0, "Sampling temperature of training answers.", gt=0)
    top_p: float = opt(0.9, "Nucleus mass of training answers (and of sampled held-out ones).", gt=0, le=1)
    beta: float = opt(0.0, "KL weight to the initial policy (0 = no reference model).", ge=0)
    reward_scale: float = opt(1.0, "Multiply RM scores (the paper used 0.1).")
    holdout: float = opt(0.2, "Share of items held out for grading (without --eval-data).", gt=0, lt=1)
    eval_data: str | None = opt(None, "Held-out items to grade (else a hash split of --data).", metavar="DATA")
    eval_n: int = count(1, "Answers per held-out item.", 4096)
    eval_temperature: float = opt(0.0, "Held-out sampling temperature (0 = greedy).", ge=0)
    eval_max_new_tokens: int = count(200, "Token cap per held-out answer.", 65536)
    compare_base: bool = opt(True, "Also grade the untrained policy on the same items.")
    gradient_checkpointing: bool | None = opt(None, "Trade compute for memory (TRL's default: on).")


# -- personalized-RM training methods (`prbench train <method>`, `train_method`, the study's `personalize`) --
ENCODER = "builtin:minilm-l6"
ENCODER_FIELD = opt(ENCODER, "Frozen sentence encoder: builtin:minilm-l6, or a sentence-transformers dir.",
                    metavar="SPEC")


class MethodView(Settings):
    """What a trained RM sees of each user, and the seed of its training."""

    condition: str = opt("profile", "What the RM sees of the user: none, profile, planner, oracle.", "-c",
                         metavar="NAME")
    retriever: str = opt("bm25", "bm25, dense:<sentence-transformers dir|id>, contriever:<dir|id>.", metavar="SPEC")
    top_k: int = field_of(ContextSpec, "top_k")
    seed: int = field_of(RunSpec, "seed")


class LoReConfig(MethodView):
    """LoRe: a shared low-rank reward basis over frozen features, per-user simplex weights (defaults chosen on
    held-out synthetic users, docs/methods.md)."""

    prior: Literal["profile", "none"] = opt(
        "profile", "profile: user weights inferred from the shown posts (+ k-shot offsets); none: free per-user "
                   "weights (LoRe as published).", metavar="NAME")
    rank: int = count(16, "Number of basis rewards B (rank of V).", 4096)
    epochs: int = count(60, "Training epochs.", 100_000)
    lr: float = opt(5e-3, "Learning rate.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the free user logits (prior none).", gt=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(1e-4, "Weight decay.", ge=0)
    offset_l2: float = opt(0.1, "Pull of a user's offset toward the profile prior.", ge=0)
    offset_steps: int = count(200, "Steps fitting a user's offset to their shots.", 100_000)
    offset_lr: float = opt(0.1, "Learning rate of the offset fit.", gt=0)
    encoder: str = ENCODER_FIELD


class StyleConfig(MethodView):
    """The persona space over lexical + stylometric features (`prbench.rewards.style`); defaults chosen on the
    real-text DSP persona split (docs/methods.md)."""

    rank: int = count(8, "Dimension B of the persona space.", 4096)
    vocab_size: int = count(6000, "Word/bigram/char-4-gram features kept (most frequent in the training texts).", 10**7)
    steps: int = count(200, "Full-batch optimisation steps.", 10**6)
    lr: float = opt(1e-2, "Learning rate.", gt=0)
    l2: float = opt(1.0, "L2 penalty on the persona map A (strong: few training users).", ge=0)
    offset_l2: float = opt(1.0, "Pull of a user's k-shot offset toward the profile prior.", ge=0)


class PReFConfig(MethodView):
    """PReF: J base rewards over frozen features, a free weight vector per user, few-response MAP adaptation."""

    rank: int = count(16, "Number of base reward functions J.", 4096)
    epochs: int = count(60, "Training epochs.", 100_000)
    lr: float = opt(5e-3, "Learning rate of the base rewards.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the user weights.", gt=0)
    user_l2: float = opt(1e-3, "L2 pull of each user's weights toward 0 in training.", ge=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(1e-4, "Weight decay of the base rewards.", ge=0)
    adapt_prior: float = opt(1.0, "Weight of the population prior in a new user's MAP fit.", ge=0)
    encoder: str = ENCODER_FIELD


class EpisodeMethod(MethodView):
    """Methods meta-trained on episodes (a user's labelled pairs and shown posts as the context)."""

    max_shots: int = count(8, "Most labelled pairs in a training context.", 4096)
    post_dropout: float = opt(0.25, "Share of shown posts dropped from a training context.", ge=0, lt=1)
    weight_decay: float = opt(1e-4, "Weight decay.", ge=0)
    encoder: str = ENCODER_FIELD


class GPOConfig(EpisodeMethod):
    """GPO: a small transformer reads a user's labelled pairs (and shown posts) in context; meta-trained over users."""

    dim: int = count(64, "Token width.", 1 << 16)
    heads: int = count(4, "Attention heads.", 256)
    layers: int = count(2, "Transformer layers.", 64)
    steps: int = count(150, "Optimisation steps (one episode per training user each).", 10**6)
    lr: float = opt(1e-3, "Learning rate.", gt=0)


class VPLConfig(EpisodeMethod):
    """VPL: an encoder over the user's pairs (and shown posts) gives a latent z the reward reads."""

    hidden: int = count(64, "Hidden units.", 1 << 16)
    latent: int = count(16, "Dimension of the user latent z.", 4096)
    beta: float = opt(0.01, "Weight of the KL term.", ge=0)
    steps: int = count(300, "Optimisation steps (one episode per user each).", 10**6)
    lr: float = opt(3e-3, "Learning rate.", gt=0)


class PALConfig(Settings):
    """PAL: users as mixtures of K prototypes. `user_lr` is larger than `lr`: user logits get few gradient signals."""

    arch: Literal["pal-a", "pal-b"] = opt("pal-a", "pal-a (ideal points) or pal-b (mixture of projections).",
                                          metavar="NAME")
    k_prototypes: int = count(8, "Number of prototypes K.", 4096)
    dim: int = count(32, "Dimension of the preference space.", 1 << 16)
    hidden: int = count(0, "Hidden units of the projection (0: linear, best held-out on small data).", 1 << 16, lo=0)
    prompt_shift: bool = opt(False, "Shift the ideal points by the prompt.")
    epochs: int = count(40, "Training epochs.", 100_000)
    lr: float = opt(3e-3, "Learning rate.", gt=0)
    user_lr: float = opt(5e-2, "Learning rate of the user mixture logits.", gt=0)
    batch_size: int = count(64, "Pairs per optimisation step.", 1 << 20)
    weight_decay: float = opt(0.0, "Weight decay.", ge=0)
    seed: int = field_of(MethodView, "seed")
    encoder: str = ENCODER_FIELD
    adapt_steps: int = count(200, "Steps fitting a new user's mixture to their shots.", 100_000)
    adapt_lr: float = opt(0.1, "Learning rate of that fit.", gt=0)


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


class PlanSettings(DataSpec):
    """The planner over a benchmark's items (`plan`, `prbench plan`, the study's `planner` section)."""

    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    seed: int = field_of(RunSpec, "seed")
    batch_size: int = count(8, "Items per planner batch (records are saved after each).", 65536)


class BuildSettings(DataSpec):
    """Benchmark construction (`prbench build`; `prbench.build.BuildConfig` adds the source and the engines)."""

    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    max_context_chars: int | None = field_of(ContextSpec, "max_context_chars")
    seed: int = field_of(RunSpec, "seed")
    max_words: int = count(100, "Word limit of each answer.", 100_000)
    min_chosen_fit: float = opt(4, "Keep only if chosen rubric_fit >= this.")
    max_rejected_fit: float = opt(2, "Keep only if rejected rubric_fit <= this.")
    max_quality_gap: float = opt(1, "Max |chosen - rejected| on factuality, relevance, helpfulness.")
    max_length_ratio: float = opt(1.5, "Max word-count ratio longer/shorter.")
    temperature: float = opt(0.7, "Generator sampling temperature (seeded per item and role).", ge=0)
    top_p: float = opt(0.9, "Generator nucleus sampling mass.", gt=0, le=1)
    repetition_penalty: float | None = opt(None, "Repetition penalty of generator and validator (default: each "
                                                 "engine's own; SmolLM2: 1.3).", gt=0)
    max_new_tokens: int = count(256, "Generator token budget per answer.", 65536)
    validator_max_new_tokens: int = count(160, "Validator token budget per reply.", 65536)
    license: str = opt("apache-2.0", "Licence id on the dataset card.", metavar="ID")
    batch_size: int = count(8, "Items per batch (records are saved after each batch).", 65536)

    @field_validator("*", mode="wrap")
    @classmethod
    def _whole_numbers_as_given(cls, v: Any, handler: Any) -> Any:
        """A float option given as 4 stays 4 (as the dataclass kept it), so build files read as before."""
        out = handler(v)
        return v if type(v) is int and type(out) is float else out


class SampleSettings(DataSpec):
    """Policy sampling for Best-of-N (`prbench sample`, `sample_policy`, the study's `sample` section).

    Only DataSpec applies whole; the other shared options are the parts' own declarations, so
    sampling gets no option it would ignore (an RM view's budget, bootstrap resamples).
    """

    n: int = count(16, "Answers per item.", 4096)
    condition: str = field_of(PolicyPromptSpec, "policy_condition")  # what the policy sees
    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    planner_file: str | None = field_of(ContextSpec, "planner_file")
    temperature: float = opt(1.0, "Sampling temperature (0 = greedy).", ge=0, le=100)
    top_p: float = opt(0.9, "Nucleus sampling mass.", gt=0, le=1)
    max_new_tokens: int = count(200, "Token cap per answer.", 65536)
    max_words: int = field_of(PolicyPromptSpec, "max_words")
    prompt_file: str | None = field_of(PolicyPromptSpec, "prompt_file")
    seed: int = field_of(RunSpec, "seed")
    batch_size: int = count(16, "Answers per model batch (a local engine's batch size).", 65536)

    @field_validator("condition")
    @classmethod
    def _policy_condition(cls, v: str) -> str:
        if v == "oracle":
            raise ValueError("the policy must not see the rubric (condition 'oracle'); use profile or none")
        return one_of(v, tuple(c for c in ALL_CONDITIONS if c != "oracle"), "condition")


class EngineAccess(Settings):
    """How to reach the models a command loads (local device, or an OpenAI-compatible endpoint)."""

    device: str | None = opt(None, "auto, cpu, cuda, cuda:1 ...", metavar="DEVICE")
    dtype: str | None = opt(None, "auto, float32, bfloat16, float16.", metavar="DTYPE")
    base_url: str | None = opt(None, "OpenAI-compatible endpoint (else OPENAI_BASE_URL).", metavar="URL")
    api_key_env: str | None = opt(None, "Name of the env var that holds the API key.", metavar="VAR")


class SynthesizeMeConfig(MethodView):
    """SynthesizeMe: an LLM induces each user's persona from their pairs, verified on held-out pairs; a judge reads it."""

    engine: str = opt("builtin:smollm2-135m-instruct", "Engine that induces personas and judges (any judge: engine).",
                      metavar="SPEC")
    candidates: int = count(3, "Persona candidates drawn per user (the best on held-out pairs is kept).", 64)
    verify_share: float = opt(0.5, "Share of a user's pairs held out to verify the candidates.", ge=0, lt=1)
    max_shots: int = count(8, "Most pairs shown to the engine when inducing.", 4096)
    max_chars: int = count(600, "Characters kept of each question and answer in the induction prompt.", 10**6)
    max_new_tokens: int = count(160, "Token limit of a persona.", 1 << 16)
    judge_tokens: int = count(128, "Token limit of a judge's reply.", 1 << 16)
    judge_route: Literal["auto", "text", "likelihood"] = opt(
        "auto", "How the judge's score is read: text (it writes 'Score: N'), likelihood (expected digit from its "
                "first-token probabilities), auto (likelihood for local engines, text for API judges).", metavar="NAME")
    base_url: str | None = field_of(EngineAccess, "base_url")
    api_key_env: str | None = field_of(EngineAccess, "api_key_env")


class GraderAccess(Settings):
    """The grader's own endpoint, when it differs from the models'."""

    grader_base_url: str | None = opt(None, "Grader's OpenAI-compatible endpoint.", metavar="URL")
    grader_api_key_env: str | None = opt(None, "Env var holding the grader's API key.", metavar="VAR")
