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




# Fields of eval's settings (`prbench.capabilities.eval.settings.EvalSettings`) that other drivers scoring with an
# RM declare too: one default, range and help text each
RM_TOP_K: Any = count(None, "Profile posts kept after retrieval (default: the number a trained model's folder "
                            "asks for, e.g. stance's whole profile of judgments; else 10).", 10_000)
RM_BATCH_SIZE: Any = count(16, "Examples per model batch.", 65536)



# -- what the personalized-RM training methods share; each method's own settings sit beside its trainer
#    (`prbench.train.<method>`: `prbench train <method>`, `train_method`, the study's `personalize`) --
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


class EpisodeMethod(MethodView):
    """Methods meta-trained on episodes (a user's labelled pairs and shown posts as the context)."""

    max_shots: int = count(8, "Most labelled pairs in a training context.", 4096)
    post_dropout: float = opt(0.25, "Share of shown posts dropped from a training context.", ge=0, lt=1)
    weight_decay: float = opt(1e-4, "Weight decay.", ge=0)
    encoder: str = ENCODER_FIELD


# -- the planner's and the samples' settings: other stages read what they write (eval the planner file, Best-of-N,
# GRPO and RGD the samples folder), so the study's `planner` and `sample` sections extend them here, below the
# capabilities (prbench.capabilities.plan, prbench.capabilities.sample) that run them.
class PlanSettings(DataSpec):
    """The planner over a benchmark's items (`plan`, `prbench plan`, the study's `planner` section)."""

    top_k: int = field_of(ContextSpec, "top_k")
    retriever: str = field_of(ContextSpec, "retriever")
    seed: int = field_of(RunSpec, "seed")
    batch_size: int = count(8, "Items per planner batch (records are saved after each).", 65536)


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


class GraderAccess(Settings):
    """The grader's own endpoint, when it differs from the models'."""

    grader_base_url: str | None = opt(None, "Grader's OpenAI-compatible endpoint.", metavar="URL")
    grader_api_key_env: str | None = opt(None, "Env var holding the grader's API key.", metavar="VAR")
