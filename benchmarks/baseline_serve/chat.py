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


def load_splitter(spec: str) -> ChatSplitter:
    """A splitter from the policy's tokenizer: `hf:DIR`, `builtin:NAME` or a folder."""
    from prbench.extras import require
    from prbench.sources import resolve_policy

    transformers = require("transformers", "hf")
    return ChatSplitter(transformers.AutoTokenizer.from_pretrained(resolve_policy(spec)), spec)
