"""The settings of the in-context-learning baseline (`prbench icl`, `run_icl`)."""

from __future__ import annotations

from typing import Literal

from prbench.config import ContextSpec, DataSpec, PolicyPromptSpec, RunSpec, count, field_of, opt


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
