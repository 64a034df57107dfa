"""`trl`: TRL's preference dataset types, standard or conversational, explicit or implicit prompt.

Source: the TRL dataset-formats guide and `trl.data_utils` (`maybe_extract_prompt`,
`extract_prompt`, trl 1.16.0). Read: `chosen`, `rejected`, optional `prompt`, optional `id`, optional `user_id` (a per-user file).
- standard, explicit prompt: `prompt`, `chosen`, `rejected` are text;
- standard, implicit prompt: `chosen` and `rejected` are whole texts; the prompt is their
  longest common prefix, cut as TRL cuts it (one character back when the character before
  the first difference is a space; `extract_prompt`, trl 1.16.0 `trl/data_utils.py` L623-632).
  That rule can cut inside a word ("Q? Yes indeed" / "Q? Yesterday" give prompt "Q? Yes",
  responses " indeed" / "terday"): such rows are kept, as TRL keeps them, and counted in a
  warning naming the first id;
- conversational, explicit prompt: `prompt` is a list of messages ending with a user turn,
  `chosen` / `rejected` are lists holding the one assistant message;
- conversational, implicit prompt: `chosen` / `rejected` are whole conversations; the prompt
  is their longest common list prefix (`extract_prompt`).
The prompt's last user message becomes `question`, the messages before it `context`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prbench.errors import DataError
from prbench.formats.base import Reader, build, messages, row_id, rows, split_last_user, stem
from prbench.schema import Example, Message


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def common_prefix(chosen: Any, rejected: Any) -> int:
    """Where TRL's `extract_prompt` cuts the shared prompt (same loop, same space rule)."""
    idx = 0
    for idx in range(min(len(chosen), len(rejected))):
        if chosen[idx] != rejected[idx]:
            if chosen[idx - 1] == " ":
                idx -= 1
            break
    return idx


def _cut_inside_word(row: Mapping[str, Any], ex: Example) -> bool:
    """A standard implicit prompt whose cut falls between two letters or digits of one word."""
    if row.get("prompt") is not None or not isinstance(row.get("chosen"), str):
        return False
    return bool(ex.question) and ex.question[-1].isalnum() and (ex.chosen[:1].isalnum() or ex.rejected[:1].isalnum())


def _one_reply(turns: list[Message], file: str, line: int, field: str) -> str:
    if len(turns) != 1 or turns[0].role != "assistant":
        raise DataError(file, line, field, "must hold exactly one assistant message (the judged response)")
    return turns[0].content


_NOT_TRL = {"subset", "domain", "context", "user_id", "profile", "rubric_aspects", "narrative", "history", "persona"}


class TRL(Reader):
    name = "trl"
    source = "TRL dataset formats (trl.data_utils.maybe_extract_prompt, trl 1.16.0); licence of your data"
    fields = "prompt (text or messages, optional: implicit prompt), chosen, rejected (text or messages), id, user_id"
    headline = "accuracy: prbench's (ties 0.5), bootstrap CI (TRL defines a data format, not a score)"
    priority = 90
    shapes = (("chosen", "rejected"),)  # prompt optional: implicit in chosen / rejected

    @classmethod
    def matches(cls, row: Mapping[str, Any]) -> bool:
        if "chosen" not in row or "rejected" not in row or "question" in row:
            return False
        kinds = {type(row["chosen"]), type(row["rejected"])}
        # user_id + prompt/chosen/rejected is also prbench's own pair file (read natively; `--format trl`
        # reads it as TRL and keeps the user); prbench's benchmark fields mark a prb row
        return kinds in ({str}, {list}) and not _NOT_TRL & set(row)

    def read(self, src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Example]]:
        mid_word: list[str] = []
        for file, line, row in rows(src, split):
            ex = self.record(row, file, line, row_id(src, file, line))
            if _cut_inside_word(row, ex):
                mid_word.append(ex.id)
            yield file, line, ex
        if mid_word:
            import warnings

            warnings.warn(f"{src}: trl cut {len(mid_word)} implicit prompt(s) inside a word, as TRL's extract_prompt "
                          f"does (first: id {mid_word[0]}); give a `prompt` column to split them yourself",
                          stacklevel=2)

    @staticmethod
    def record(row: Mapping[str, Any], file: str, line: int, default_id: str | None = None) -> Example:
        chosen, rejected, prompt = row.get("chosen"), row.get("rejected"), row.get("prompt")
        context: list[Message] = []
        if isinstance(chosen, str) and isinstance(rejected, str):
            if prompt is None:  # implicit prompt: the shared prefix
                cut = common_prefix(chosen, rejected)
                prompt, chosen, rejected = chosen[:cut], chosen[cut:], rejected[cut:]
            if not isinstance(prompt, str):
                raise DataError(file, line, "prompt", "must be text when chosen and rejected are text")
            question = prompt
        elif _is_messages(chosen) and _is_messages(rejected):
            c_turns = messages(chosen, file, line, "chosen")
            r_turns = messages(rejected, file, line, "rejected")
            if prompt is None or isinstance(prompt, str):  # implicit (a text prompt beside messages is ignored, as TRL does)
                cut = common_prefix(c_turns, r_turns)
                p_turns, c_turns, r_turns = c_turns[:cut], c_turns[cut:], r_turns[cut:]
            else:
                p_turns = messages(prompt, file, line, "prompt")
            context, question = split_last_user(p_turns, file, line, "prompt")
            chosen = _one_reply(c_turns, file, line, "chosen")
            rejected = _one_reply(r_turns, file, line, "rejected")
        else:
            raise DataError(file, line, "chosen", "chosen and rejected must both be text or both be message lists")
        given = row.get("id")
        return build(Example, file, line, id=str(given) if given is not None else default_id or f"{stem(file)}:{line}",
                     question=question, context=context, chosen=chosen, rejected=rejected, profile=[],
                     rubric_aspects=[], category=str(row.get("category") or "trl"), **_user(row, file, line))


def _user(row: Mapping[str, Any], file: str, line: int) -> dict[str, str]:
    """The row's `user_id` when it has one (a per-user preference file in TRL's shape)."""
    user = row.get("user_id")
    if user is None:
        return {}
    if isinstance(user, bool) or not isinstance(user, (str, int)) or not str(user).strip():
        raise DataError(file, line, "user_id", "must be a non-empty id")
    return {"user_id": str(user)}
