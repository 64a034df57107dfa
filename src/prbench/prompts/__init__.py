"""Prompt templates: one text file per role, written for this project.

Templates use `{{name}}` placeholders (so JSON braces in a prompt need no escaping). Every
run records the sha256 of each template it used; users may pass their own template file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from prbench.errors import PrbenchError
from prbench.store.cache import text_hash

_FIELD = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Prompt:
    """A template with its name and content hash."""

    name: str
    text: str

    @property
    def hash(self) -> str:
        return text_hash(self.text)

    @property
    def fields(self) -> set[str]:
        return set(_FIELD.findall(self.text))

    def head(self, before: frozenset[str]) -> Prompt:
        """The template up to its first placeholder named in `before` (all of it when none is)."""
        cut = min((m.start() for m in _FIELD.finditer(self.text) if m.group(1) in before), default=len(self.text))
        return Prompt(self.name, self.text[:cut])

    def bare(self) -> str:
        """The template's own words, placeholders removed (what it adds to every prompt)."""
        return _FIELD.sub("", self.text)

    def render(self, **values: str) -> str:
        """Fill every placeholder; a missing value is an error, never an empty string."""
        missing = self.fields - values.keys()
        if missing:
            raise PrbenchError(f"prompt {self.name!r}: no value for {', '.join(sorted(missing))}")
        return _FIELD.sub(lambda m: str(values[m.group(1)]), self.text)


def load_prompt(name: str, path: str | Path | None = None) -> Prompt:
    """The built-in template `name` (prompts/<name>.txt), or the user's file at `path`."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise PrbenchError(f"prompt file not found: {p}")
        return Prompt(name, p.read_text(encoding="utf-8"))
    res = resources.files("prbench.prompts") / f"{name}.txt"
    if not res.is_file():
        raise PrbenchError(f"no built-in prompt named {name!r}")
    return Prompt(name, res.read_text(encoding="utf-8"))
