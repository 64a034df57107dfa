"""Cut the policy's answer out of the text an RL framework sends (prompt + response, special tokens kept).

OpenRLHF 0.11.2 (`openrlhf/utils/agent.py`, `SingleTurnAgentExecutor.execute`) sends
`query = tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)` together with
`prompts = [prompt]`, the chat-templated prompt string. The answer is what follows the prompt;
when the prompt is absent or does not match the decoded text, it is what follows the first
assistant header of the policy's chat template. Special tokens (end of turn, EOS, padding) are
then removed wherever they are, as verl's `decode(..., skip_special_tokens=True)` does, and
surrounding whitespace is dropped: both frameworks then reward the same answer text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_USER, _ANSWER = "\u2063PRBENCH-USER\u2063", "\u2063PRBENCH-ANSWER\u2063"


class ChatSplitter:
    """Response text out of `prompt + response` as decoded by the policy tokenizer."""

    def __init__(self, tokenizer: Any, name: str = ""):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"{name or 'the policy tokenizer'} has no chat template")
        self.name = name
        user = [{"role": "user", "content": _USER}]
        gen = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template([*user, {"role": "assistant", "content": _ANSWER}], tokenize=False)
        # text between the user's content and the answer: the user turn's end plus the assistant header
        self.assistant_header = gen[gen.rindex(_USER) + len(_USER):]
        if not self.assistant_header.strip():
            raise ValueError(f"{name or 'the policy'}'s chat template marks no assistant turn")
        end = full[full.rindex(_ANSWER) + len(_ANSWER):].strip()
        specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
        specials.update(t for t in (end, tokenizer.eos_token, tokenizer.pad_token) if t)
        self.special = sorted((t for t in specials if t), key=len, reverse=True)  # longest first

    def response(self, query: str, prompt: str | None = None) -> str:
        """The answer inside `query`; ValueError when the text holds no assistant turn."""
        if prompt and query.startswith(prompt):
            rest = query[len(prompt):]
        else:
            at = query.find(self.assistant_header)
            if at < 0:
                raise ValueError("query holds no assistant turn of the policy's chat template "
                                 "(wrong --policy-template?)")
            rest = query[at + len(self.assistant_header):]
        for tok in self.special:
            rest = rest.replace(tok, "")
        return rest.strip()


def load_tokenizer(spec: str) -> Any:
    """A tokenizer: `hf:DIR`, `builtin:NAME` or a folder."""
    from prbench.runtime.extras import require
    from prbench.sources import resolve_policy

    transformers = require("transformers", "hf")
    return transformers.AutoTokenizer.from_pretrained(resolve_policy(spec))


def load_splitter(spec: str) -> ChatSplitter:
    """A splitter from the policy's tokenizer: `hf:DIR`, `builtin:NAME` or a folder."""
    return ChatSplitter(load_tokenizer(spec), spec)


class RenderedPrompts:
    """verl's `/classify` input -> (the training row's user context, the answer).

    verl 0.9.1 (`verl/experimental/reward_loop/reward_loop.py`, `_preprocess_reward_inputs`, lines
    197-229) sends `apply_chat_template(raw_prompt + [assistant: response], tokenize=False)` with the
    RM's tokenizer, leading BOS removed. The user context is not in that text as fields, so the
    rows the trainer reads (`prbench export verl`'s `prompt` and `extra_info`) are rendered the same
    way at start; an input is matched by its prompt part exactly, and the answer is what follows,
    special tokens removed as `ChatSplitter` does.
    """

    def __init__(self, tokenizer: Any, rows: Sequence[tuple[Sequence[Mapping[str, Any]], dict[str, Any]]],
                 name: str = ""):
        self.splitter, self.tokenizer = ChatSplitter(tokenizer, name), tokenizer
        self.bos = getattr(tokenizer, "bos_token", None) or ""
        full = self._render(tokenizer, [{"role": "user", "content": _USER}])
        # as the template writes it before an assistant message's content (may differ from the generation prompt)
        self.header = full[full.rindex(_USER) + len(_USER):full.rindex(_ANSWER)]
        if not self.header.strip():
            raise ValueError(f"{name or 'the RM tokenizer'}'s chat template marks no assistant turn")
        self.prompts: dict[str, dict[str, Any]] = {}
        for n, (messages, ctx) in enumerate(rows):
            text = self._render(tokenizer, messages)
            prefix = text[:text.rindex(_ANSWER)]
            if not prefix.endswith(self.header):
                raise ValueError(f"row {n}: its rendered prompt does not end in the assistant header")
            if self.prompts.setdefault(prefix, ctx) != ctx:
                raise ValueError(f"row {n}: the same prompt as an earlier row with another user context")

    def _render(self, tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> str:
        chat = [dict(m) for m in messages] + [{"role": "assistant", "content": _ANSWER}]
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
        return text[len(self.bos):] if self.bos and text.startswith(self.bos) else text

    def render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """A chat-form request's messages (the answer last) as verl would have sent them in `input`."""
        text = self.tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=False,
                                                  tokenize=False)
        return text[len(self.bos):] if self.bos and text.startswith(self.bos) else text

    def find(self, text: str) -> tuple[dict[str, Any], str]:
        """(user context, answer) of one rendered input; ValueError when no served row's prompt starts it."""
        if self.bos and text.startswith(self.bos):
            text = text[len(self.bos):]
        at = text.find(self.header)
        while at >= 0:
            end = at + len(self.header)
            ctx = self.prompts.get(text[:end])
            if ctx is not None:
                rest = text[end:]
                for tok in self.splitter.special:
                    rest = rest.replace(tok, "")
                return ctx, rest.strip()
            at = text.find(self.header, end)
        raise ValueError("the input's prompt is none of the --users rows' prompts (rendered with --rm-template)")
