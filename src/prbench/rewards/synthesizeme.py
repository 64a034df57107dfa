"""SynthesizeMe (Ryan et al. 2025): an LLM induces a persona from a user's pairs, verified, then a judge reads it.

`synthesizeme:<dir>` (`prbench train synthesizeme`). Per user, with the user's labelled pairs:
1. *induce*: the engine reads up to `max_shots` of the pairs (question, preferred answer, other
   answer; each text cut at `max_chars`) and writes a short description of what this person
   values; `candidates` descriptions are drawn (the first greedy, the others sampled at
   temperature 0.7 with seeds from (seed, user, i));
2. *verify*: the pairs are split (seeded) into an induction part and a held-out part
   (`verify_share`); every candidate is judged on the held-out pairs, and the candidate with
   the best held-out accuracy (first on ties) is the user's persona. A user with one pair
   induces on it with no verification (recorded);
3. *judge*: a pointwise judge scores each response with the persona shown as the user context
   (`View.persona`) in place of what the view showed. Two routes (`judge_route`):
   `text`: the `judge:` pointwise judge writes its reasoning and "Score: N" (1-10), parsed;
   `likelihood`: no generation; the engine's probabilities of the reply's first token being
   each digit 1-9 give the expected score sum_i i p(i) / sum_i p(i) (`ScoreByLikelihood`), as
   the `judge:` likelihood mode reads A / B. A small local model (SmolLM2-135M) writes no
   readable score on real text (0 of 192 verification pairs, benchmarks/RESULTS_methods.md) but
   still has a distribution over the digits. `auto` (default): likelihood for local engines
   (`hf:`, `builtin:`, `vllm:`), text for API judges (`openai:`, `anthropic:`).
A user without a persona (an unseen user, k = 0) is scored with the view as it is (the plain
judge on the condition's context). `adapt(user, pairs)` runs 1-2 for a new user; under
`history` the shown pairs are induced from. Any engine: `openai:*` endpoints, `builtin:smollm2-*`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prbench.context.conditions import View
from prbench.engines.base import GenParams
from prbench.errors import PrbenchError
from prbench.rewards.base import PointwiseRM, Score
from prbench.rewards.pal import shots_key, shown_pairs, view_user
from prbench.store.cache import content_key

INDUCE = """Below are questions that one person asked. Each was answered twice, and the person said which answer they preferred.

{pairs}

From these choices, describe this person in two or three sentences: what they value in an answer (tone, style, depth, format, point of view). Write only the description."""
PERSONAS_FILE = "personas.json"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + " ..."


def induce_prompt(pairs: Sequence[Any], max_shots: int, max_chars: int) -> str:
    blocks = [f"Question: {_cut(p.prompt, max_chars)}\nPreferred answer: {_cut(p.chosen, max_chars)}\n"
              f"Other answer: {_cut(p.rejected, max_chars)}" for p in list(pairs)[:max_shots]]
    return INDUCE.format(pairs="\n\n".join(blocks))


class Synthesizer:
    """Steps 1-2 of the module docstring over one engine and one judge (shared by training and adaptation)."""

    def __init__(self, engine: Any, judge: Any, settings: dict[str, Any]):
        self.engine, self.judge, self.s = engine, judge, settings

    def candidates(self, user: str, pairs: Sequence[Any]) -> list[str]:
        prompt = [{"role": "user", "content": induce_prompt(pairs, self.s["max_shots"], self.s["max_chars"])}]
        params = [GenParams(max_new_tokens=self.s["max_new_tokens"], temperature=0.0 if i == 0 else 0.7,
                            seed=int(content_key(self.s["seed"], user, i)[:8], 16)) for i in range(self.s["candidates"])]
        outs = self.engine.generate([prompt] * len(params), params)
        return list(dict.fromkeys(g.text.strip() for g in outs if not g.error and g.text.strip()))

    def accuracy(self, persona: str, pairs: Sequence[Any]) -> float | None:
        views = [View(example_id=f"verify-{i}", question=p.prompt, condition="persona", persona=persona)
                 for i, p in enumerate(pairs)]
        scores = self.judge.score([(v, p.chosen) for v, p in zip(views, pairs)] +
                                  [(v, p.rejected) for v, p in zip(views, pairs)])
        credits = [1.0 if c.value > r.value else 0.0 if c.value < r.value else 0.5
                   for c, r in zip(scores[: len(pairs)], scores[len(pairs):]) if c.valid and r.valid]
        return float(np.mean(credits)) if credits else None

    def synthesize(self, user: str, pairs: Sequence[Any]) -> dict[str, Any]:
        """{'persona', 'verify_accuracy', 'candidates': [(text, held-out accuracy)]} for one user's pairs."""
        pairs = sorted(pairs, key=lambda p: p.key)
        random.Random(f"{self.s['seed']}:synthesizeme:{user}").shuffle(pairs)
        n_held = round(self.s["verify_share"] * len(pairs)) if len(pairs) > 1 else 0
        held, induce = pairs[:n_held], pairs[n_held:] or pairs
        cands = self.candidates(user, induce)
        if not cands:
            return {"persona": "", "verify_accuracy": None, "candidates": [], "error": "the engine wrote no persona"}
        scored = [(c, self.accuracy(c, held) if held else None) for c in cands]
        best = max(range(len(scored)), key=lambda i: (scored[i][1] if scored[i][1] is not None else -1.0, -i))
        return {"persona": scored[best][0], "verify_accuracy": scored[best][1], "candidates": scored,
                "induced_on": len(induce), "verified_on": len(held)}


SCORE_PROMPT = """What we know about the person:
{context}

The person's question:
{question}

An answer they were given:
<answer>
{response}
</answer>

How well does this answer suit this person, from 1 (not at all) to 9 (perfectly)? Reply with one digit."""
DIGITS = tuple(str(i) for i in range(1, 10))
LOCAL_ENGINES = ("hf", "builtin", "vllm")


class ScoreByLikelihood(PointwiseRM):
    """A 1-9 rating read from the engine's first-token probabilities of the digits: the expected digit.

    No generation, so nothing to parse: the score is sum_i i p(i) / sum_i p(i) over i = 1..9. An
    engine that gave no usable probabilities (all -inf or NaN) gives Score(nan) with the reason.
    """

    def __init__(self, engine: Any):
        engine.require("choice_logprobs", "first-token probabilities (the likelihood score route)")
        self.engine = engine
        self.spec = f"score-likelihood:{engine.spec}"

    @staticmethod
    def prompt(view: View, response: str) -> str:
        from prbench.rewards.judges import NO_CONTEXT

        return SCORE_PROMPT.format(context=view.context() or NO_CONTEXT, question=view.question, response=response)

    @staticmethod
    def expected(logprobs: dict[str, float]) -> float | None:
        values = [(int(d), logprobs.get(d, math.nan)) for d in DIGITS]
        finite = [(i, lp) for i, lp in values if math.isfinite(lp)]
        if not finite:
            return None
        top = max(lp for _, lp in finite)
        weights = [(i, math.exp(lp - top)) for i, lp in finite]
        return sum(i * w for i, w in weights) / sum(w for _, w in weights)

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        lps = self.engine.choice_logprobs([[{"role": "user", "content": self.prompt(v, r)}] for v, r in batch],
                                          list(DIGITS))
        out = []
        for lp in lps:
            value = self.expected(lp)
            out.append(Score(math.nan, error="engine gave no probability for any digit") if value is None
                       else Score(value))
        return out

    def fingerprint(self) -> dict[str, Any]:
        from prbench.store.cache import content_key as key

        return {"spec": self.spec, "engine": self.engine.fingerprint(), "prompt": key(SCORE_PROMPT)[:16]}


def judge_route(config: dict[str, Any]) -> str:
    """`text` or `likelihood` for a folder's settings (`auto`: likelihood for local engines, module docstring)."""
    route = config.get("judge_route") or "text"  # folders written before the likelihood route read text
    if route == "auto":
        return "likelihood" if config["engine"].partition(":")[0] in LOCAL_ENGINES else "text"
    if route not in ("text", "likelihood"):
        raise PrbenchError(f"synthesizeme judge_route must be auto, text or likelihood, got {route!r}")
    return route


def open_parts(config: dict[str, Any]) -> tuple[Any, Any]:
    """(engine, pointwise judge over it: the text or the likelihood route) from a folder's or a run's settings."""
    from prbench.engines.base import load_engine
    from prbench.rewards.judges import load_judge

    access = {k: v for k, v in (config.get("engine_options") or {}).items() if v is not None}
    engine = load_engine(config["engine"], **access)
    if judge_route(config) == "likelihood":
        return engine, ScoreByLikelihood(engine)
    judge = load_judge(engine, mode="pointwise", max_new_tokens=config.get("judge_tokens", 128), seed=config["seed"])
    return engine, judge


class SynthesizeMeReward(PointwiseRM):
    """Scores (view, response) with a folder written by `prbench train synthesizeme` (see module docstring)."""

    adaptable = True

    def __init__(self, path: str, spec: str | None = None, adapt: str | None = None, **_: Any):
        from prbench.rewards.folders import require_folder

        p = Path(path)
        require_folder(spec or f"synthesizeme:{path}", p, "synthesizeme")
        try:
            self.config = json.loads((p / "config.json").read_text(encoding="utf-8"))
            self.personas: dict[str, dict[str, Any]] = json.loads((p / PERSONAS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PrbenchError(f"synthesizeme:{path}: expected config.json and {PERSONAS_FILE} "
                               f"(train with `prbench train synthesizeme`): {exc}") from None
        if self.config.get("arch") != "synthesizeme":
            raise PrbenchError(f"synthesizeme:{path}: this folder holds a {self.config.get('arch')!r} model")
        self.path, self.spec = str(path), spec or f"synthesizeme:{path}"
        engine, judge = open_parts(self.config)
        self.judge, self.synth = judge, Synthesizer(engine, judge, self.config)
        self.adapted: dict[str, dict[str, Any]] = {}
        self.fitted: dict[str, str] = {}
        self.counts = {"with_persona": 0, "without_persona": 0}
        if adapt:
            from prbench.data.pairs import load_pairs

            shots = load_pairs(adapt)
            for user in dict.fromkeys(q.user_id for q in shots):
                if user not in self.personas:
                    self.adapt(user, [q for q in shots if q.user_id == user])

    def _persona(self, view: View) -> str:
        if view.pairs:
            key = shots_key(shown_pairs(view))
            if key not in self.fitted:
                self.fitted[key] = self.synth.synthesize(f"history:{key}", shown_pairs(view))["persona"]
            return self.fitted[key]
        u = view_user(view)
        found = self.adapted.get(u or "") or self.personas.get(u or "")
        return (found or {}).get("persona", "")

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        shown = []
        for view, resp in batch:
            persona = self._persona(view)
            self.counts["with_persona" if persona else "without_persona"] += 1
            shown.append((dataclasses.replace(view, persona=persona, posts=(), pairs=()) if persona else view, resp))
        return self.judge.score(shown)

    def adapt(self, user: str, pairs: Sequence[Any]) -> None:
        """Induce and verify `user`'s persona from their labelled pairs (replaces earlier shots)."""
        self.adapted.pop(user, None)
        if pairs:
            self.adapted[user] = self.synth.synthesize(user, pairs)

    def seen_users(self) -> set[str]:
        return set(self.personas)

    def fingerprint(self) -> dict[str, Any]:
        return {"spec": self.spec, "arch": "synthesizeme", "judge": self.judge.fingerprint(),
                "route": judge_route(self.config),
                "personas": content_key(self.personas)[:16],
                "adapted": content_key({u: v.get("persona") for u, v in sorted(self.adapted.items())})[:16]}

    def run_info(self) -> dict[str, Any]:
        from prbench.rewards.heads import read_protocol

        info: dict[str, Any] = {"arch": "synthesizeme", "trained_users": len(self.personas),
                                "adapted_users": len(self.adapted), **self.counts}
        protocol = read_protocol(self.path)
        if protocol is not None:
            info["protocol"] = protocol
        return info
