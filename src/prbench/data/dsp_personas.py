"""Real-text persona users from DSP domain items: user- and question-disjoint development splits.

Why: the synthetic personas (`synth_personas`) are templated; methods chosen on them did not
carry over to real persona-written text. DSP (Everyone Deserves A Reward, CC BY-NC 4.0, not
shipped) answers each question in four writing personas (academy, business, entertainment,
literature). A *persona user* has a mixture over those personas; their profile is `profile`
earlier texts (DSP answers to other questions, each written in a persona drawn from the
mixture), and on a pair (two persona answers to one question) they prefer the answer whose
persona has the larger weight in their mixture.

Splits (`build_splits`): questions are shuffled (seeded) and cut into a train side and a test
side; each side is cut again into profile questions and pair questions, so no question is both
a profile text and a judged pair, and train and test share no question. Train users live on
the train side, test users (unseen) on the test side. Variants:
- `persona`: one persona per user (weight 1), 20 profile texts (the issue's held-out shape);
- `mixed`: a primary persona with weight in [0.55, 0.8] and a secondary one with the rest;
  profile texts follow the mixture, pairs never pit two equal weights;
- `short`: one persona per user, 3 profile texts.
Personas are balanced over users (round robin), so a user-blind model is at chance. A pair whose
two answers are the same text (DSP has a few items where two personas answer alike) is left out:
there is nothing to prefer, and `prbench data validate` refuses such a pair.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.data.pairs import PreferencePair
from prbench.errors import DataError, PrbenchError
from prbench.schema import ProfilePost

PERSONAS = ("academy", "business", "entertainment", "literature")
VARIANTS = {"persona": (20, False), "mixed": (20, True), "short": (3, False)}  # profile size, mixed


def load_questions(path: str | Path) -> list[dict[str, Any]]:
    """DSP domain items as [{'query', 'responses': {persona: text}}]; a malformed row names its index and field."""
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(rows, list):
        raise DataError(str(path), 1, "", "expected a JSON list of DSP domain items")
    out = []
    for i, row in enumerate(rows):
        resp = row.get("responses") if isinstance(row, Mapping) else None
        if not isinstance(row, Mapping) or not isinstance(row.get("query"), str) or not isinstance(resp, Mapping):
            raise DataError(str(path), i + 1, "query/responses", "each item needs a query and a responses map")
        for p in PERSONAS:
            if not isinstance(resp.get(p), str) or not resp[p].strip():
                raise DataError(str(path), i + 1, f"responses.{p}", "missing or empty")
        out.append({"query": row["query"], "responses": {p: resp[p] for p in PERSONAS}})
    return out


def _mixture(i: int, mixed: bool, rng: random.Random) -> dict[str, float]:
    primary = PERSONAS[i % len(PERSONAS)]
    if not mixed:
        return {primary: 1.0}
    secondary = rng.choice([p for p in PERSONAS if p != primary])
    w = round(rng.uniform(0.55, 0.8), 3)
    return {primary: w, secondary: round(1 - w, 3)}


def _users(prefix: str, n: int, questions: Sequence[dict], profile_q: Sequence[int], pair_q: Sequence[int],
           pairs_per_user: int, profile: int, mixed: bool, seed: int) -> list[PreferencePair]:
    out: list[PreferencePair] = []
    for i in range(n):
        rng = random.Random(f"{seed}:{prefix}:{i}")
        user = f"{prefix}{i:03d}"
        mix = _mixture(i, mixed, rng)
        names, weights = list(mix), list(mix.values())
        posts = [ProfilePost(id=f"{user}-p{j}", category=persona, text=questions[q]["responses"][persona])
                 for j, q in enumerate(rng.sample(list(profile_q), profile))
                 for persona in [rng.choices(names, weights)[0]]]
        for j, q in enumerate(rng.sample(list(pair_q), pairs_per_user)):
            a = rng.choices(names, weights)[0]
            b = rng.choice([p for p in PERSONAS if mix.get(p, 0.0) != mix[a]])
            good, bad = (a, b) if mix[a] > mix.get(b, 0.0) else (b, a)
            item = questions[q]
            if item["responses"][good].strip() == item["responses"][bad].strip():
                continue  # DSP has items where two personas answer alike: no preference to learn (after the draws,
                # so every other pair is the one it was)
            out.append(PreferencePair(user_id=user, prompt=item["query"], chosen=item["responses"][good],
                                      rejected=item["responses"][bad], profile=posts, id=f"{user}-q{q}",
                                      category=f"{good}>{bad}"))
    return out


def build_splits(questions: Sequence[dict], variant: str = "persona", *, train_users: int = 32,
                 test_users: int = 20, train_pairs: int = 12, test_pairs: int = 10, seed: int = 0,
                 profile: int | None = None) -> dict[str, list[PreferencePair]]:
    """{'train': pairs of training users, 'test': pairs of unseen users on unseen questions} (module docstring)."""
    if variant not in VARIANTS:
        raise PrbenchError(f"dsp persona split: unknown variant {variant!r} (use {', '.join(VARIANTS)})")
    size, mixed = VARIANTS[variant]
    size = profile or size
    order = list(range(len(questions)))
    random.Random(f"{seed}:dsp-questions").shuffle(order)
    half = len(order) // 2
    sides = {"train": order[:half], "test": order[half:]}
    out = {}
    for side, n, per in (("train", train_users, train_pairs), ("test", test_users, test_pairs)):
        ids = sides[side]
        cut = len(ids) // 2
        prof_q, pair_q = ids[:cut], ids[cut:]
        if len(prof_q) < size or len(pair_q) < per:
            raise PrbenchError(f"dsp persona split: {len(questions)} questions are too few for {size} profile texts "
                               f"and {per} pairs per user on the {side} side")
        out[side] = _users(f"dsp-{variant}-{side}-", n, questions, prof_q, pair_q, per, size, mixed, seed)
    return out
