"""LLM judges: a language model (any engine) asked which response suits this user, or how well one does.

Three modes, one spec prefix (`judge:<engine spec>`, mode chosen by the `mode` option):

- `pairwise` (default, a PairwiseRM): the model sees the question, the condition's user
  context, Response A and Response B, reasons briefly and ends with "Result: A|B|tie". The
  verdict is parsed (`parse_verdict`); output that cannot be read as one clear verdict is a
  parse failure (`Verdict(winner=None)`), retried `retries_on_parse_failure` times with a
  different derived seed, and then counted, never turned into a side or a tie.
- `pointwise` (a PointwiseRM): the model rates one response on a numeric scale (default
  1-10); the score is parsed (`parse_score`); missing or out-of-range -> `Score(nan)`.
- `likelihood` (a PairwiseRM): no generation; the engine's log-probabilities of the reply
  starting with "A" vs "B" decide (exact equality is a tie). `Verdict.meta["p_a"]` holds
  p(A) / (p(A) + p(B)). Small local models cannot write usable verdicts; this mode reads
  their preference directly. They also put nearly all mass on one letter whatever the
  responses say (SmolLM2-135M: "A" for every sample pair), so compare `p_a` across the two
  orders (`--both-orders`) or set `debias_position=True`, which averages each query with
  its swap inside the judge.

Under condition `none` a variant of each template without the user-context block is used
(`*_nocontext.txt`); a user template (`prompt_file`) serves every condition and gets
`NO_CONTEXT` as `{{context}}` under `none`.

Retries at temperature 0: a greedy retry with only a new seed would repeat the same output,
so a retry samples at `retry_temperature` (default 0.7) with a seed derived from the
request's own seed and the attempt number.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from prbench.context.conditions import View
from prbench.engines.base import PREFIX_KEY, Engine, Generation, GenParams, engine_keywords, load_engine
from prbench.errors import SpecError
from prbench.prompts import load_prompt
from prbench.registry import ENGINES
from prbench.rewards.base import PairQuery, PairwiseRM, PointwiseRM, Score, Verdict
from prbench.specs import Kind, KindOptions, OpenOptions, RMOptions, combine, options_model, resolve_spec
from prbench.store.cache import content_key

MODES = ("pairwise", "pointwise", "likelihood")
RAW_CHARS = 400  # raw model output kept per verdict (head ... tail)
NO_CONTEXT = "(Nothing is known about this person beyond the question.)"
_TEMPLATES = {"pairwise": "judge_pairwise", "pointwise": "judge_pointwise", "likelihood": "judge_choice"}


# ---------------------------------------------------------------------------------------------
# Parsing (pure functions: no input may crash them)
# ---------------------------------------------------------------------------------------------

_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Drop reasoning blocks: `<think>...</think>`, an unterminated `<think>...` (the model ran out
    of tokens while thinking: nothing after it is an answer), and everything before a lone
    `</think>` (templates that open the block in the prompt)."""
    text = _THINK_BLOCK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    m = _THINK_OPEN.search(text)
    if m:
        text = text[: m.start()]
    return text


_LETTER = r"(?:response|answer|assistant|output|option)?\s*[\(\[]?\s*(A|B)\s*[\)\]]?"
_TIE_WORD = r"(tie|equal|equally good|draw|both equally)"
_TIE_AFTER = r"(?=\s*(?:$|[\n.,;:!?)\]}\"'*]))"
# After a letter: end of text/line, punctuation, or a word that continues an explanation.
# Keeps "Answer: A good reply would..." from reading as a verdict.
_AFTER = r"(?=\s*(?:$|[\n.,;:!?)\]}\"'*]|\s(?:is|because|as|since|was|wins|fits|suits|better|-|\u2014|\u2013|\()))"
_LABEL = (r"(?:final\s+verdict|final\s+answer|final\s+decision|final\s+choice|verdict|result|decision|"
          r"winner|answer|choice|preference|preferred(?:\s+response)?|better\s+response|my\s+choice|"
          r"the\s+better\s+(?:response|answer)\s+is|i\s+(?:choose|pick|prefer|select))")
_STRONG_PATTERNS = [
    re.compile(r"\[\[\s*" + _LETTER + r"\s*\]\]", re.IGNORECASE),
    re.compile(r"\\boxed\{\s*" + _LETTER + r"\s*\}", re.IGNORECASE),
    re.compile(r"[\"'](?:winner|verdict|choice|answer|preferred|better|preference|result|decision)[\"']\s*:\s*"
               r"[\"']\s*" + _LETTER + r"\s*[\"']", re.IGNORECASE),
    re.compile(r"\b" + _LABEL + r"\s*(?:is|:|=|-|\u2014)?\s*" + _LETTER + _AFTER, re.IGNORECASE),
]
_STRONG_TIE = [
    re.compile(r"\[\[\s*" + _TIE_WORD + r"\s*\]\]", re.IGNORECASE),
    re.compile(r"[\"'](?:winner|verdict|choice|answer|preferred|better|preference|result|decision)[\"']\s*:\s*"
               r"[\"']\s*" + _TIE_WORD + r"\s*[\"']", re.IGNORECASE),
    re.compile(r"\b" + _LABEL + r"\s*(?:is|:|=|-|\u2014)?\s*(?:a\s+)?" + _TIE_WORD + _TIE_AFTER, re.IGNORECASE),
]
_WEAK_PATTERNS = [
    re.compile(r"\b(?:response|answer|assistant|output)\s+(A|B)\s+(?:is|was)\s+(?:clearly\s+|much\s+|slightly\s+)?"
               r"(?:the\s+)?(?:better|preferred|superior|more\s+(?:suitable|appropriate|personali[sz]ed|relevant|helpful)"
               r"|a\s+better)\b", re.IGNORECASE),
    re.compile(r"\bi\s+(?:would\s+)?(?:prefer|choose|pick|select|go\s+with)\s+(?:response|answer|assistant)\s+(A|B)\b", re.IGNORECASE),
    re.compile(r"\b(?:response|answer|assistant)\s+(A|B)\s+(?:wins|better\s+(?:suits|fits|matches|addresses))\b", re.IGNORECASE),
]
_WEAK_TIE = [
    re.compile(r"\b(?:it'?s|it\s+is|this\s+is|declare\s+a|call\s+it\s+a)\s+(?:a\s+)?(tie|draw)\b", re.IGNORECASE),
    re.compile(r"\bboth\s+(?:responses|answers)?\s*(?:are|fit|suit|serve)\s+(?:the\s+person\s+|this\s+person\s+)?"
               r"(equally)\b", re.IGNORECASE),
    re.compile(r"\b(?:responses|answers)\s+are\s+(equally)\s+(?:good|suitable|well|appropriate)\b", re.IGNORECASE),
]
_BARE = re.compile(r"^\W*(?:(?:response|answer|option)\s+)?(A|B|tie|equal)\W*$", re.IGNORECASE)
_LEADING = re.compile(r"^\W*(?:(?:response|answer|option)\s+)?(A|B)(?:\s*[.:)\-,]|\s*$)", re.IGNORECASE)
_AMBIGUOUS_TAIL = re.compile(r"^\s*(?:or|and|/|,|&)\s*(?:response\s+)?(?:A|B)\b", re.IGNORECASE)


def _norm(token: str) -> str:
    t = token.strip().lower()
    return t.upper() if t in ("a", "b") else "tie"


def _find(patterns: Sequence[re.Pattern[str]], text: str, tie: bool) -> list[tuple[int, str | None]]:
    """(end position, verdict) of every match; a letter followed by 'or B' etc. is ambiguous (None)."""
    hits: list[tuple[int, str | None]] = []
    for pat in patterns:
        for m in pat.finditer(text):
            verdict: str | None = "tie" if tie else _norm(m.group(1))
            if not tie and _AMBIGUOUS_TAIL.match(text[m.end(1):m.end(1) + 30].lstrip(")]*\"' ")):
                verdict = None
            hits.append((m.end(), verdict))
    return hits


def parse_verdict(text: str) -> str | None:
    """'A', 'B' or 'tie' from a judge's output; None when there is no clear verdict.

    Tiers, strongest first: labelled verdicts ("Result: A", "[[B]]", "Final answer: tie",
    JSON {"winner": "A"}, \\boxed{A}); then phrases ("Response A is better", "I prefer
    Response B", "it's a tie"); then a line holding only a letter or "tie". Within the
    strongest tier present, the LAST verdict wins (models revise themselves); if it names two
    letters ("A or B") the output is ambiguous -> None. Reasoning blocks are ignored.
    """
    if not isinstance(text, str):
        return None
    body = strip_reasoning(text).replace("*", "")
    if not body.strip():
        return None
    for patterns, ties in ((_STRONG_PATTERNS, _STRONG_TIE), (_WEAK_PATTERNS, _WEAK_TIE)):
        hits = _find(patterns, body, False) + _find(ties, body, True)
        if hits:
            last = max(hits, key=lambda h: h[0])[0]
            at_last = {v for end, v in hits if end == last}
            return at_last.pop() if len(at_last) == 1 else None
    bare = [m.group(1) for line in body.splitlines() if (m := _BARE.match(line.strip()))]
    if bare:
        return _norm(bare[-1])
    lead = _LEADING.match(body.strip())
    return _norm(lead.group(1)) if lead else None


_NUM = r"([-+]?\d+(?:\.\d+)?)"
_SCORE_LABELLED = [
    re.compile(r"[\"'](?:score|rating|grade)[\"']\s*:\s*[\"']?\s*" + _NUM, re.IGNORECASE),
    re.compile(r"\[\[\s*" + _NUM + r"\s*\]\]"),
    re.compile(r"\\boxed\{\s*" + _NUM + r"\s*\}"),
    re.compile(r"\b(?:final\s+score|overall\s+score|overall\s+rating|final\s+rating|score|rating|grade)"
               r"\s*(?:is|:|=|-|of)?\s*" + _NUM + r"(?:\s*(?:/|out\s+of)\s*" + _NUM + r")?(?![\d.]*\d)", re.IGNORECASE),
]
_SCORE_FRACTION = re.compile(_NUM + r"\s*(?:/|out\s+of)\s*" + _NUM, re.IGNORECASE)
_SCORE_BARE = re.compile(r"^\W*" + _NUM + r"\s*(?:/\s*\d+)?\W*$")


def parse_score(text: str, scale: tuple[float, float] = (1, 10)) -> float | None:
    """A numeric score from a judge's output, or None (missing, out of range, wrong denominator).

    Tiers: labelled ("Score: 7", "Rating: 8.5", "score: 7/10", JSON {"score": 7}, [[7]]), then
    a fraction "7/10" / "7 out of 10", then an output that is only a number. The last match of
    the strongest tier present counts. A denominator other than the scale's maximum, or a
    value outside the scale, is a failure: the judge did not answer on our scale.
    """
    if not isinstance(text, str):
        return None
    body = strip_reasoning(text).replace("*", "")
    lo, hi = float(scale[0]), float(scale[1])
    found: tuple[str, str | None] | None = None
    hits: list[tuple[int, str, str | None]] = []
    for pat in _SCORE_LABELLED:
        for m in pat.finditer(body):
            hits.append((m.end(), m.group(1), m.group(2) if (m.lastindex or 0) >= 2 else None))
    if hits:
        _, v, d = max(hits, key=lambda h: h[0])
        found = (v, d)
    else:
        fracs = list(_SCORE_FRACTION.finditer(body))
        if fracs:
            found = (fracs[-1].group(1), fracs[-1].group(2))
        else:
            lines = [ln for ln in body.strip().splitlines() if ln.strip()]
            bare = _SCORE_BARE.match(lines[-1].strip()) if lines else None
            if bare:
                found = (bare.group(1), None)
    if found is None:
        return None
    try:
        value = float(found[0])
        if found[1] is not None and float(found[1]) != hi:
            return None
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(value) or value < lo or value > hi:
        return None
    return value


def clip_raw(text: str, limit: int = RAW_CHARS) -> str:
    """Head and tail of a long output (the verdict usually sits at the end)."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + " [...] " + text[-(limit - head - 7):]


# ---------------------------------------------------------------------------------------------
# Engines and prompts
# ---------------------------------------------------------------------------------------------

# Options the evaluator gives every RM; not worth reporting when an engine has no use for them.
_EVALUATOR_OPTIONS = {"batch_size", "seed"}


def open_engine(engine: str | Engine, options: dict[str, Any]) -> tuple[Engine, list[str]]:
    """Load an engine, passing it only the options its constructor names.

    Why: RM options arrive flat (`batch_size`, `seed`, `base_url`, ... next to `mode`), and
    the evaluator adds some every RM gets. Returns (engine, names of options not used).
    """
    if isinstance(engine, Engine):
        return engine, sorted(set(options) - _EVALUATOR_OPTIONS)
    names = engine_keywords(engine)
    accepted = set(options) if names is None else {k for k in options if k in names}
    return (load_engine(engine, **{k: v for k, v in options.items() if k in accepted}),
            sorted(set(options) - accepted - _EVALUATOR_OPTIONS))


def engine_facts(engine: Engine, ignored_options: list[str]) -> dict[str, Any]:
    """What a run summary records of the engine behind an RM: its request stats and unused options."""
    info: dict[str, Any] = {}
    stats = getattr(engine, "stats", None)
    if isinstance(stats, dict) and stats:
        info["engine_stats"] = dict(stats)
    if ignored_options:
        info["ignored_options"] = ignored_options
    return info


def context_of(view: View) -> str:
    """The user context shown under the view's condition, within its character budget."""
    return view.context(view.shown_posts) if view.units else view.context()


def was_truncated(view: View) -> bool:
    return view.shown_posts < view.units


def question_of(view: View) -> str:
    """The question as the judge reads it: for a multi-turn item, the dialogue so far, then the last turn."""
    return f"{view.transcript()}\n\nUser: {view.question}" if view.turns else view.question


VARYING = frozenset({"response", "response_a", "response_b"})  # what differs between requests about one item


class _Templates:
    """The built-in template pair for a role (with / without context), or one user template."""

    def __init__(self, role: str, prompt_file: str | None):
        if prompt_file:
            user = load_prompt(role, prompt_file)
            self.with_ctx, self.without_ctx = user, user
        else:
            self.with_ctx = load_prompt(role)
            self.without_ctx = load_prompt(f"{role}_nocontext")

    def render(self, view: View, **values: Any) -> str:
        return "".join(self.parts(view, **values))

    def parts(self, view: View, **values: Any) -> tuple[str, str]:
        """(stable start, the rest) of the rendered prompt: the start ends where the first response is filled
        in, so it holds the instructions, the person's context and the question, and every request about
        one item under one condition (both orders, retries) shares it: what providers cache."""
        ctx = context_of(view)
        tpl = self.with_ctx if ctx else self.without_ctx
        fields = {"question": question_of(view), "context": ctx or NO_CONTEXT, **values}
        filled = {k: str(v) for k, v in fields.items() if k in tpl.fields}
        start = tpl.head(VARYING)
        head = start.render(**{k: v for k, v in filled.items() if k in start.fields}) if start.text != tpl.text else ""
        full = tpl.render(**filled)
        return head, full[len(head):]

    def hashes(self) -> dict[str, str]:
        if self.with_ctx is self.without_ctx:
            return {f"{self.with_ctx.name}(user file)": self.with_ctx.hash}
        return {self.with_ctx.name: self.with_ctx.hash, self.without_ctx.name: self.without_ctx.hash}


def template_tokens(mode: str = "pairwise", with_context: bool = True) -> tuple[int, int]:
    """Estimated tokens of a built-in judge template's own words (no placeholders): (its stable start, the
    rest). What a dry run adds per call, and the start is what every request about an item shares."""
    from prbench.cost import estimate_input_tokens

    tpl = load_prompt(_TEMPLATES[mode] + ("" if with_context else "_nocontext"))
    start = tpl.head(VARYING)
    head, rest = (estimate_input_tokens(t.bare()) for t in (start, type(tpl)(tpl.name, tpl.text[len(start.text):])))
    return head, rest


def derive_seed(seed: int, attempt: int) -> int:
    """The seed of retry `attempt` (0 = the request's own seed)."""
    return seed if attempt == 0 else int(content_key("judge-retry", seed, attempt)[:8], 16)


def judge_params(engine: Engine, max_new_tokens: int, temperature: float, retry_temperature: float,
                 seed: int, attempt: int) -> GenParams:
    """Sampling parameters of one attempt, on top of the engine's own defaults.

    Why the defaults: some engines carry settings their model needs (the builtin SmolLM2 loops
    without its repetition penalty); we only set length, temperature and seed.
    """
    base = getattr(engine, "default_params", None)
    base = base if isinstance(base, GenParams) else GenParams()
    temp = temperature if attempt == 0 or temperature > 0 else retry_temperature
    return dataclasses.replace(base, max_new_tokens=int(max_new_tokens), temperature=float(temp),
                               seed=derive_seed(seed, attempt))


class _JudgeBase:
    """Shared plumbing: engine, templates, identity, counters."""

    mode: str

    def __init__(self, engine: str | Engine, *, mode: str, prompt_file: str | None, max_new_tokens: int,
                 temperature: float, retries_on_parse_failure: int, retry_temperature: float,
                 engine_options: dict[str, Any]):
        self.mode = mode
        self.engine, self.ignored_options = open_engine(engine, engine_options)
        engine_spec = engine if isinstance(engine, str) else self.engine.spec
        self.spec = f"judge:{engine_spec}"
        self.name = self.spec if mode == "pairwise" else f"judge[{mode}]:{engine_spec}"
        self.templates = _Templates(_TEMPLATES[mode], prompt_file)
        self.prompt_file = prompt_file
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.retries = max(0, int(retries_on_parse_failure))
        self.retry_temperature = float(retry_temperature)
        self.counts: dict[str, int] = {"requests": 0, "parse_failures": 0, "retried": 0,
                                       "recovered_by_retry": 0, "engine_errors": 0}

    def params(self, seed: int, attempt: int) -> GenParams:
        return judge_params(self.engine, self.max_new_tokens, self.temperature, self.retry_temperature, seed, attempt)

    def fingerprint(self) -> dict[str, Any]:
        gen = self.params(0, 0).as_dict()
        gen.pop("seed")  # per request; the engine's defaults (e.g. repetition penalty) are kept
        return {"spec": self.spec, "mode": self.mode, "engine": self.engine.fingerprint(),
                "prompts": self.templates.hashes(), "gen_params": gen, "retries": self.retries,
                "retry_temperature": self.retry_temperature, **self._extra_fingerprint()}

    def _extra_fingerprint(self) -> dict[str, Any]:
        return {}

    def run_info(self) -> dict[str, Any]:
        return {"judge_mode": self.mode, "prompt_hashes": self.templates.hashes(),
                **{f"judge_{k}": v for k, v in self.counts.items()}, **engine_facts(self.engine, self.ignored_options)}

    def messages(self, head: str, rest: str) -> list[dict[str, str]]:
        """One user turn; for an engine that can cache prompts, its stable start is marked
        (`engines.base.stable_prefix`): the text sent is the same either way."""
        turn = {"role": "user", "content": head + rest}
        if head and getattr(self.engine, "prompt_cache", False):
            turn[PREFIX_KEY] = head
        return [turn]

    def _generate_with_retries(self, prompts: list[tuple[str, str]], seeds: list[int],
                               parse: Any) -> list[tuple[Generation, Any, int]]:
        """Generate once for all prompts ((stable start, rest) each; one engine call), then retry parse
        failures as a batch."""
        results: list[tuple[Generation, Any, int] | None] = [None] * len(prompts)
        todo = list(range(len(prompts)))
        for attempt in range(self.retries + 1):
            if not todo:
                break
            if attempt:
                self.counts["retried"] += len(todo)
            gens = self.engine.generate([self.messages(*prompts[i]) for i in todo],
                                        [self.params(seeds[i], attempt) for i in todo])
            still: list[int] = []
            for i, g in zip(todo, gens):
                if g.error:
                    results[i] = (g, None, attempt + 1)
                    continue
                parsed = parse(g.text)
                results[i] = (g, parsed, attempt + 1)
                if parsed is None:
                    still.append(i)
                elif attempt:
                    self.counts["recovered_by_retry"] += 1
            todo = still
        out = [r for r in results if r is not None]
        self.counts["requests"] += len(out)
        self.counts["engine_errors"] += sum(1 for g, _, _ in out if g.error)
        self.counts["parse_failures"] += sum(1 for g, p, _ in out if not g.error and p is None)
        return out


# ---------------------------------------------------------------------------------------------
# The three judges
# ---------------------------------------------------------------------------------------------


class PairwiseJudge(_JudgeBase, PairwiseRM):
    """Generates a verdict for A vs B; see the module doc for parsing and retries."""

    def __init__(self, engine: str | Engine, **kw: Any):
        super().__init__(engine, mode="pairwise", **kw)

    def prompt(self, q: PairQuery) -> str:
        return "".join(self.parts(q))

    def parts(self, q: PairQuery) -> tuple[str, str]:
        return self.templates.parts(q.view, response_a=q.response_a, response_b=q.response_b)

    def compare(self, batch: Sequence[PairQuery]) -> list[Verdict]:
        if not batch:
            return []
        outs = self._generate_with_retries([self.parts(q) for q in batch], [q.seed for q in batch], parse_verdict)
        verdicts = []
        for q, (g, winner, attempts) in zip(batch, outs):
            truncated = was_truncated(q.view) or bool(g.meta.get("truncated"))
            meta = {"attempts": attempts, "finish_reason": g.finish_reason}
            if g.error:
                verdicts.append(Verdict(None, raw="", truncated=truncated, error=f"engine: {g.error}", meta=meta))
            else:
                verdicts.append(Verdict(winner, raw=clip_raw(g.text), truncated=truncated, meta=meta))
        return verdicts


class PointwiseJudge(_JudgeBase, PointwiseRM):
    """Rates one response for this user on `scale`; unreadable or off-scale ratings are NaN."""

    def __init__(self, engine: str | Engine, scale: tuple[float, float] = (1, 10), seed: int = 0, **kw: Any):
        lo, hi = (float(s) for s in scale)
        if not lo < hi:
            raise SpecError(f"judge scale must be (low, high) with low < high, got {scale}")
        self.scale = (lo, hi)
        self.seed = int(seed)
        super().__init__(engine, mode="pointwise", **kw)

    def _extra_fingerprint(self) -> dict[str, Any]:
        return {"scale": list(self.scale), "seed": self.seed}

    def prompt(self, view: View, response: str) -> str:
        return "".join(self.parts(view, response))

    def parts(self, view: View, response: str) -> tuple[str, str]:
        fmt = (lambda x: str(int(x)) if x == int(x) else str(x))
        return self.templates.parts(view, response=response, scale_min=fmt(self.scale[0]),
                                    scale_max=fmt(self.scale[1]))

    def score(self, batch: Sequence[tuple[View, str]]) -> list[Score]:
        if not batch:
            return []
        # Seed from content: the same (view, response) gets the same sampling seed in any batch.
        seeds = [int(content_key("pointwise", self.seed, v.key(), r)[:8], 16) for v, r in batch]
        outs = self._generate_with_retries([self.parts(v, r) for v, r in batch], seeds,
                                           lambda t: parse_score(t, self.scale))
        scores = []
        for (view, _), (g, value, _) in zip(batch, outs):
            truncated = was_truncated(view) or bool(g.meta.get("truncated"))
            if g.error:
                scores.append(Score(math.nan, truncated=truncated, error=f"engine: {g.error}"))
            elif value is None:
                scores.append(Score(math.nan, truncated=truncated, error="parse failure"))
            else:
                scores.append(Score(value, truncated=truncated))
        return scores


class LikelihoodJudge(_JudgeBase, PairwiseRM):
    """Compares log p(reply starts with 'A') and log p('B'): no generation, no parsing.

    `debias_position=True` also scores the swapped prompt (B shown first) and averages:
    p_a = (p(A | x, y) + 1 - p(A | y, x)) / 2. Small models put almost all mass on one letter
    whatever the responses say; the swap cancels that constant preference and keeps what
    depends on the content. It doubles the cost and changes the name to
    `judge[likelihood-debiased]:...`.
    """

    choices = ("A", "B")

    def __init__(self, engine: str | Engine, debias_position: bool = False, **kw: Any):
        super().__init__(engine, mode="likelihood", **kw)
        self.engine.require("choice_logprobs", "logprobs")  # fail before the first request, not per record
        self.debias_position = bool(debias_position)
        if self.debias_position:
            self.name = f"judge[likelihood-debiased]:{self.spec.removeprefix('judge:')}"

    def prompt(self, q: PairQuery) -> str:
        return self.templates.render(q.view, response_a=q.response_a, response_b=q.response_b)

    def _extra_fingerprint(self) -> dict[str, Any]:
        return {"choices": list(self.choices), "gen_params": None, "retries": None, "retry_temperature": None,
                "debias_position": self.debias_position}

    @staticmethod
    def _p_a(lp: dict[str, float]) -> float | None:
        """p(A) / (p(A) + p(B)); None when the engine gave nothing usable."""
        la, lb = lp.get("A"), lp.get("B")
        if la is None or lb is None or math.isnan(la) or math.isnan(lb) or (math.isinf(la) and math.isinf(lb)):
            return None
        return 1.0 / (1.0 + math.exp(min(max(lb - la, -700.0), 700.0)))

    def compare(self, batch: Sequence[PairQuery]) -> list[Verdict]:
        if not batch:
            return []
        queries = list(batch)
        if self.debias_position:
            queries += [PairQuery(q.view, q.response_b, q.response_a, q.seed) for q in batch]
        lps = self.engine.choice_logprobs([self.messages(*self.templates.parts(q.view, response_a=q.response_a,
                                                                               response_b=q.response_b))
                                           for q in queries], list(self.choices))
        self.counts["requests"] += len(queries)
        out = []
        for i, q in enumerate(batch):
            lp = lps[i]
            truncated = was_truncated(q.view)
            p_a = self._p_a(lp)
            meta: dict[str, Any] = {"logp_a": lp.get("A"), "logp_b": lp.get("B")}
            if p_a is not None and self.debias_position:
                p_swapped = self._p_a(lps[len(batch) + i])
                meta.update(p_a_raw=p_a, p_a_swapped=p_swapped)
                p_a = None if p_swapped is None else (p_a + 1.0 - p_swapped) / 2.0
            if p_a is None:
                self.counts["engine_errors"] += 1
                out.append(Verdict(None, raw=json.dumps(lp), truncated=truncated, meta=meta,
                                   error="engine: no usable log-probabilities for A/B"))
                continue
            winner: Literal["A", "B", "tie"]
            if self.debias_position:
                winner = "A" if p_a > 0.5 else "B" if p_a < 0.5 else "tie"
            else:
                la, lb = lp["A"], lp["B"]
                winner = "A" if la > lb else "B" if lb > la else "tie"  # exact, not via rounded p_a
            meta["p_a"] = p_a
            out.append(Verdict(winner, raw=f"logp(A)={lp['A']:.6g} logp(B)={lp['B']:.6g}", truncated=truncated,
                               meta=meta))
        return out


def _load_judge(
    engine_spec: str | Engine,
    mode: str = "pairwise",
    prompt_file: str | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    retries_on_parse_failure: int = 1,
    scale: Sequence[float] | str = (1, 10),
    retry_temperature: float = 0.7,
    engine_options: dict[str, Any] | None = None,
    seed: int = 0,
    debias_position: bool = False,
    **options: Any,
) -> PairwiseJudge | PointwiseJudge | LikelihoodJudge:
    """Build a judge over `engine_spec` (e.g. `openai:gpt-5.1`, `builtin:smollm2-135m-instruct`).

    `engine_options` go to the engine; other unknown keyword options (the evaluator's
    `batch_size`, or engine settings given flat such as `base_url`) are passed to the engine
    when its constructor names them and otherwise ignored (listed in run_info). `seed` is the
    run seed: pairwise requests carry the evaluator's per-example seed; pointwise requests
    derive theirs from (seed, view, response).
    """
    if mode not in MODES:
        raise SpecError(f"judge mode must be one of {', '.join(MODES)}, got {mode!r}")
    eng_opts = {**options, **(engine_options or {})}
    common: dict[str, Any] = {
        "prompt_file": prompt_file, "max_new_tokens": max_new_tokens, "temperature": temperature,
        "retries_on_parse_failure": retries_on_parse_failure, "retry_temperature": retry_temperature,
        "engine_options": eng_opts,
    }
    if mode == "pointwise":
        bounds = ([float(p) for p in re.split(r"[,\s\-:]+", scale) if p] if isinstance(scale, str)
                  else [float(p) for p in scale])
        if len(bounds) != 2:
            raise SpecError(f"judge scale must be two numbers, got {scale!r}")
        return PointwiseJudge(engine_spec, scale=(bounds[0], bounds[1]), seed=seed, **common)
    if mode == "likelihood":
        return LikelihoodJudge(engine_spec, debias_position=debias_position, **common)
    return PairwiseJudge(engine_spec, **common)


class JudgeOptions(RMOptions):
    """A judge's own options; its engine's options (`base_url`, `device`, ...) are given beside them."""

    mode: Literal["pairwise", "pointwise", "likelihood"] = "pairwise"
    prompt_file: str | None = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    retries_on_parse_failure: int = 1
    scale: Sequence[float] | str = (1, 10)
    retry_temperature: float = 0.7
    engine_options: dict[str, Any] | None = None
    debias_position: bool = False


def over_engine(own: type[KindOptions]) -> Callable[[str], type[KindOptions]]:
    """`options_model` of a kind whose rest is an engine spec: its own options plus the engine's."""
    def model(rest: str) -> type[KindOptions]:
        engine = options_model(ENGINES, rest)
        return combine(own, engine if engine is not None else OpenOptions)
    return model


def engine_spec(rest: str, root: Path) -> str:
    """`resolve_spec` of a kind whose rest is an engine spec: the engine's kind resolves it."""
    return resolve_spec(ENGINES, rest, root)




def _judge_run_name(rest: str, mode: str = "pairwise", debias_position: bool = False, **_: Any) -> str:
    """The judge's `name` without building it (what `_JudgeBase` and `LikelihoodJudge` set)."""
    if mode == "likelihood" and debias_position:
        return f"judge[likelihood-debiased]:{rest}"
    return f"judge:{rest}" if mode == "pairwise" else f"judge[{mode}]:{rest}"


load_judge = Kind(
    _load_judge, options_model=over_engine(JudgeOptions), resolve_spec=engine_spec, run_name=_judge_run_name,
    # the mode decides pointwise or pairwise
    model_class=lambda rest, mode="pairwise": {"pointwise": PointwiseJudge, "likelihood": LikelihoodJudge}.get(
        mode, PairwiseJudge))
