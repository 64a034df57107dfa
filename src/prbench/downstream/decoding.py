"""The reward-guided decoding loop (definition in `prbench.capabilities.rgd.driver`): KV-cached stepping of a
local policy over a left-padded batch, candidates rescored by prefix rewards at decision points.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prbench.config import DecodingSpec, GuidanceSpec
from prbench.context.conditions import View
from prbench.downstream.prefix_rewards import PrefixRewards, rm_text, shape_rewards
from prbench.engines.base import Engine, load_engine
from prbench.engines.transformers_engine import left_pad
from prbench.errors import PrbenchError
from prbench.runtime.extras import require
from prbench.runtime.progress import beat

# ---------------------------------------------------------------------------------------------
# The policy: KV-cached stepping over a left-padded batch
# ---------------------------------------------------------------------------------------------


class RGDParams(GuidanceSpec, DecodingSpec):
    """What the decoding loop reads of RGDSettings (definition in `prbench.capabilities.rgd.driver`).

    `repetition_penalty=None` means the engine's default (`resolved_penalty`).
    """


def resolved_penalty(engine: Any, value: float | None) -> float:
    """The repetition penalty actually used: the given one, else the engine's default."""
    if value is not None:
        return float(value)
    default = getattr(engine, "default_params", None)
    return float(getattr(default, "repetition_penalty", 1.0) or 1.0)


@dataclass
class RGDJob:
    """One answer to decode: the policy's prompt ids, the RM's view, the per-item sampling seed."""

    prompt_ids: list[int]
    view: View | None
    seed: int = 0


@dataclass
class RGDOutput:
    token_ids: list[int]
    text: str
    finish_reason: str  # stop | length
    decision_points: int = 0
    changed: int = 0  # decision points where the pick differs from the policy's argmax
    invalid_rewards: int = 0


def require_local_policy(engine: Any) -> None:
    """RGD and policy accuracy need the logits: a local transformers engine."""
    if not (hasattr(engine, "model") and hasattr(engine, "tokenizer")):
        raise PrbenchError(f"{getattr(engine, 'spec', engine)}: reward-guided decoding needs a local policy "
                           "with logits (hf:DIR, hf:HUB_ID or builtin:NAME), not an API engine")


def policy_pad_id(engine: Any) -> int:
    """The engine's pad id (TransformersEngine sets one), else the tokenizer's, else 0."""
    pad = getattr(engine, "pad_id", None)
    if pad is None:
        pad = engine.tokenizer.pad_token_id
    return int(pad) if pad is not None else 0


class PolicyForward:
    """Calls a causal LM across transformers versions (`cache` vs `past_key_values`)."""

    def __init__(self, model: Any):
        params = inspect.signature(model.forward).parameters
        self.model = model
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.position_ids = "position_ids" in params
        self.logits_to_keep = "logits_to_keep" in params

    def __call__(self, ids: Any, mask: Any, pos: Any, cache: Any = None, keep: int = 1) -> tuple[Any, Any]:
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": cache is not False}
        if self.position_ids:
            kw["position_ids"] = pos
        if self.logits_to_keep:
            kw["logits_to_keep"] = keep
        if cache is not None and cache is not False:
            kw[self.cache_arg] = cache
        out = self.model(**kw)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits[:, -keep:, :].float(), new_cache


def apply_repetition_penalty(logits: Any, seen: Any, penalty: float) -> Any:
    """HF's rule on the tokens in `seen` (bool mask, same shape): positive / penalty, negative * penalty."""
    torch = require("torch", "hf")
    if penalty == 1.0:
        return logits
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)


def _sample_index(scores: np.ndarray, temperature: float, gen: Any) -> int:
    """Inverse-CDF draw from softmax(scores / T) with one uniform from the row's generator."""
    torch = require("torch", "hf")
    z = scores / temperature
    p = np.exp(z - z.max())
    cdf = np.cumsum(p)
    u = float(torch.rand((), generator=gen, dtype=torch.float64)) * cdf[-1]
    return min(int(np.searchsorted(cdf, u, side="right")), len(scores) - 1)


def rgd_decode(
    engine: Any,
    jobs: Sequence[RGDJob],
    params: RGDParams,
    rewards: PrefixRewards | None = None,
    batch_size: int = 8,
) -> list[RGDOutput]:
    """Decode every job with reward guidance (module docstring); jobs are batched `batch_size` at a time."""
    guided = params.w != 0.0
    if guided and rewards is None:
        raise PrbenchError("reward-guided decoding with w != 0 needs an RM")
    require_local_policy(engine)
    out: list[RGDOutput] = []
    for start in range(0, len(jobs), max(1, batch_size)):
        out.extend(_decode_batch(engine, list(jobs[start : start + batch_size]), params, rewards if guided else None))
    return out


def _decode_batch(engine: Any, jobs: list[RGDJob], params: RGDParams, rewards: PrefixRewards | None) -> list[RGDOutput]:
    torch = require("torch", "hf")
    model, tok = engine.model, engine.tokenizer
    device = next(model.parameters()).device
    pad_id = policy_pad_id(engine)
    eos = set(getattr(engine, "eos_ids", None) or ([tok.eos_token_id] if tok.eos_token_id is not None else []))
    penalty = resolved_penalty(engine, params.repetition_penalty)
    fwd = PolicyForward(model)
    n = len(jobs)
    gens = [torch.Generator(device="cpu").manual_seed(int(j.seed)) if params.temperature > 0 else None for j in jobs]
    resp: list[list[int]] = [[] for _ in jobs]
    finish = ["length"] * n
    active = [True] * n
    stats = [{"decision_points": 0, "changed": 0, "invalid": 0} for _ in jobs]
    if params.max_new_tokens == 0:
        return [RGDOutput([], "", "length") for _ in jobs]

    with torch.inference_mode():
        ids, mask, pos = left_pad([j.prompt_ids for j in jobs], pad_id, device)
        logits, cache = fwd(ids, mask, pos, None, keep=1)
        logits = logits[:, -1, :]
        vocab = logits.shape[-1]
        seen = torch.zeros((n, vocab), dtype=torch.bool, device=device)
        for i, j in enumerate(jobs):
            seen[i, torch.tensor(j.prompt_ids, dtype=torch.long, device=device)] = True
        next_pos = pos[:, -1] + 1
        for step in range(params.max_new_tokens):
            beat(f"decoding {n} answers, token {step}/{params.max_new_tokens}")
            proc = apply_repetition_penalty(logits, seen, penalty)
            argmax = proc.argmax(dim=-1).tolist()
            choice = list(argmax)
            decide = step % params.chunk == 0 and (rewards is not None or params.temperature > 0)
            if decide:
                choice = _decide(engine, jobs, proc, argmax, params, rewards, resp, active, gens, stats)
            for i in range(n):
                if not active[i]:
                    continue
                t = choice[i]
                if t in eos:
                    active[i], finish[i] = False, "stop"
                    continue
                resp[i].append(t)
                seen[i, t] = True
            if not any(active) or step == params.max_new_tokens - 1:
                break
            feed = torch.tensor([[choice[i] if active[i] else pad_id] for i in range(n)], dtype=torch.long,
                                device=device)
            col = torch.tensor([[1 if active[i] else 0] for i in range(n)], dtype=mask.dtype, device=device)
            mask = torch.cat([mask, col], dim=1)
            logits, cache = fwd(feed, mask, next_pos[:, None], cache, keep=1)
            logits = logits[:, -1, :]
            next_pos = next_pos + 1
    texts = tok.batch_decode(resp, skip_special_tokens=True)
    return [RGDOutput(resp[i], texts[i], finish[i], stats[i]["decision_points"], stats[i]["changed"],
                      stats[i]["invalid"]) for i in range(n)]


def _decide(engine: Any, jobs: list[RGDJob], proc: Any, argmax: list[int], params: RGDParams,
            rewards: PrefixRewards | None, resp: list[list[int]], active: list[bool], gens: list[Any],
            stats: list[dict[str, int]]) -> list[int]:
    """One decision point for every active row: top-k candidates, one RM call, guided pick."""
    torch = require("torch", "hf")
    k = min(params.k, proc.shape[-1])
    logp = torch.log_softmax(proc, dim=-1)
    top = torch.topk(proc, k, dim=-1).indices
    cand_lp = logp.gather(-1, top).double().cpu().numpy()
    top = top.cpu().tolist()
    rows = [i for i in range(len(jobs)) if active[i]]
    reward_of: dict[int, np.ndarray] = {}
    if rewards is not None:
        seqs = [resp[i] + [c] for i in rows for c in top[i]]
        texts = engine.tokenizer.batch_decode(seqs, skip_special_tokens=True)
        queries: list[tuple[View, str]] = []
        for r, i in enumerate(rows):
            view = jobs[i].view
            if view is None:
                raise PrbenchError("reward-guided decoding with w != 0 needs a view per job")
            queries.extend((view, rm_text(t)) for t in texts[r * k : (r + 1) * k])
        flat = rewards(queries)
        for r, i in enumerate(rows):
            reward_of[i] = np.asarray(flat[r * k : (r + 1) * k], dtype=np.float64)
    choice = list(argmax)
    for i in rows:
        stats[i]["decision_points"] += 1
        score = cand_lp[i]
        if i in reward_of:
            shaped, bad = shape_rewards(reward_of[i], params.reward_norm)
            stats[i]["invalid"] += bad
            score = score + params.w * shaped
        if params.temperature > 0:
            pick = _sample_index(score, params.temperature, gens[i])
        else:
            pick = int(np.argmax(score))  # first maximum = the higher policy logit on ties
        if i not in reward_of and params.temperature == 0:
            choice[i] = argmax[i]
        else:
            choice[i] = top[i][pick]
        if choice[i] != argmax[i]:
            stats[i]["changed"] += 1
    return choice



def load_policy(policy: str | Engine, options: dict[str, Any] | None = None) -> Engine:
    engine = policy if isinstance(policy, Engine) else load_engine(policy, **(options or {}))
    require_local_policy(engine)
    return engine
