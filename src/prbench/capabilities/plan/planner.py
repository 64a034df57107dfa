"""Planner: profile -> the aspects this user probably expects (the paper's `planner` condition).

Idea (LaMP-QA's PlanPers): before judging, an LLM reads the question and the user's top-k
profile posts and writes a short rubric-like list of expected aspects (title + reason). The
RM then sees that list instead of raw posts, which is closer in form to what helps most (the
oracle rubric) and less noisy than the posts.

- The planner sees exactly what the `profile` condition shows an RM: the posts come from
  `conditions.build_view(ex, "profile", ...)` and `view.context()`. The narrative and the true
  rubric never reach it.
- Output is parsed into `schema.RubricAspect` (`parse_aspects`: a JSON list, or numbered or
  bulleted "Title: reason" lines; at most `max_aspects`, default 6). Unparseable or empty
  output is a counted failure, retried once (sampling at `retry_temperature` with a derived
  seed), and then recorded as an empty list with `"failed"` set: never invented. Under
  `planner`, an empty list shows the RM no context (the same input as `none`).
- The run writing a planner file over a benchmark (`plan()`, `prbench plan`) is the plan
  capability, `prbench.capabilities.plan.driver`: JSONL records that `conditions.read_planner_file`
  reads, resumable.
- Model calls are cached by content (engine fingerprint, prompt, sampling parameters) in the
  prbench cache, so a re-run with a new output file costs nothing.
- `train_planner()` fine-tunes a causal LM on LaMP-QA-form items (input: the planner prompt
  with question + top-k posts; target: the item's true rubric rendered in the planner's output
  format) with TRL's SFTTrainer, LoRA by default (merged into the weights before saving), and
  saves a plain HF folder usable as `hf:<dir>`. Train on items that are not in the benchmark
  you evaluate on (LaMP-QA's train split for the released benchmark's test split).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.context.conditions import View, build_view
from prbench.context.retrieval import Retriever, load_retriever
from prbench.engines.base import Engine, GenParams
from prbench.errors import PrbenchError
from prbench.prompts import Prompt, load_prompt
from prbench.rewards.judges import clip_raw, judge_params, open_engine, strip_reasoning
from prbench.schema import RubricAspect, SourceItem
from prbench.store.cache import Cache, NullCache, content_key

MAX_ASPECTS = 6
NO_POSTS = "(This person has no earlier posts.)"
MAX_TITLE_CHARS = 200
MAX_REASON_CHARS = 600


# ---------------------------------------------------------------------------------------------
# Output format: rendering (the SFT target) and parsing
# ---------------------------------------------------------------------------------------------


def render_aspects(aspects: Sequence[RubricAspect]) -> str:
    """The planner's output format: '1. Title: reason' lines (what `parse_aspects` reads back).

    Colons inside a title would move the split point, so they become dashes.
    """
    lines = []
    for i, a in enumerate(aspects, 1):
        title = " ".join(a.aspect.replace(":", " -").split())
        reason = " ".join(a.reason.split())
        lines.append(f"{i}. {title}: {reason}" if reason else f"{i}. {title}")
    return "\n".join(lines)


_ITEM = re.compile(r"^\s*(?:\d{1,2}\s*[.)]|[-*\u2022+])\s+(.*\S)\s*$")
_SPLIT = re.compile(r"\s*(?::|\s-\s|\s\u2014\s|\s\u2013\s)\s*")
_TITLE_KEYS = ("aspect", "title", "name", "expectation")
_REASON_KEYS = ("reason", "why", "rationale", "explanation", "description")


def _clean(text: str, limit: int) -> str:
    text = " ".join(str(text).replace("**", "").replace("__", "").split()).strip(" *_#`\"'")
    return text[:limit].rstrip()


def _from_json(body: str) -> list[tuple[str, str]] | None:
    """Aspect pairs from a JSON list (or {"aspects": [...]}) somewhere in the text."""
    candidates = []
    start, end = body.find("["), body.rfind("]")
    if 0 <= start < end:
        candidates.append(body[start : end + 1])
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        candidates.append(body[start : end + 1])
    for blob in candidates:
        try:
            data = json.loads(blob)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            data = next((data[k] for k in ("aspects", "rubric", "items") if isinstance(data.get(k), list)), None)
        if not isinstance(data, list):
            continue
        pairs: list[tuple[str, str]] = []
        for item in data:
            if isinstance(item, str):
                pairs.append((item, ""))
            elif isinstance(item, dict):
                title = next((item[k] for k in _TITLE_KEYS if isinstance(item.get(k), str)), None)
                reason = next((item[k] for k in _REASON_KEYS if isinstance(item.get(k), str)), "")
                if title:
                    pairs.append((title, reason))
        if pairs:
            return pairs
    return None


def parse_aspects(text: str, max_aspects: int = MAX_ASPECTS) -> list[RubricAspect] | None:
    """Aspects from a planner's output, or None when nothing usable is there (a failure).

    Accepts a JSON list of {"aspect"/"title", "reason"} objects or strings, or numbered /
    bulleted lines "Title: reason" (also "Title - reason"). Unnumbered prose is ignored, so a
    preamble ("Here are the aspects:") is never taken for an aspect. Duplicate titles are
    dropped; at most `max_aspects` are kept, in the planner's order.
    """
    if not isinstance(text, str):
        return None
    body = strip_reasoning(text)
    pairs = _from_json(body)
    if pairs is None:
        pairs = []
        for line in body.splitlines():
            m = _ITEM.match(line)
            if not m:
                continue
            parts = _SPLIT.split(m.group(1).replace("**", ""), maxsplit=1)
            pairs.append((parts[0], parts[1] if len(parts) > 1 else ""))
    out: list[RubricAspect] = []
    seen: set[str] = set()
    for title, reason in pairs:
        t, r = _clean(title, MAX_TITLE_CHARS), _clean(reason, MAX_REASON_CHARS)
        if not t or not re.search(r"\w", t) or t.lower() in seen:
            continue
        seen.add(t.lower())
        out.append(RubricAspect(aspect=t, reason=r))
        if len(out) >= max_aspects:
            break
    return out or None


# ---------------------------------------------------------------------------------------------
# Running a planner
# ---------------------------------------------------------------------------------------------


@dataclass
class PlanOutcome:
    """One example's plan: aspects (empty on failure), failure reason, attempts, raw output."""

    id: str
    aspects: list[RubricAspect]
    failed: str | None = None
    attempts: int = 1
    raw: str = ""


def planner_view(example: SourceItem, retriever: Retriever, top_k: int, cache: Cache | None = None) -> View:
    """What the planner sees: exactly the `profile` condition's view of the example."""
    return build_view(example, "profile", retriever=retriever, top_k=top_k, cache=cache)


class Planner:
    """An LLM (any engine spec) that turns question + profile posts into expected aspects."""

    def __init__(
        self,
        engine: str | Engine,
        *,
        prompt_file: str | None = None,
        max_aspects: int = MAX_ASPECTS,
        max_new_tokens: int = 384,
        temperature: float = 0.0,
        retries: int = 1,
        retry_temperature: float = 0.7,
        cache: Cache | None = None,
        engine_options: dict[str, Any] | None = None,
    ):
        self.engine, self.ignored_options = open_engine(engine, dict(engine_options or {}))
        self.spec = engine if isinstance(engine, str) else self.engine.spec
        self.prompt_template: Prompt = load_prompt("planner", prompt_file)
        self.max_aspects = int(max_aspects)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.retries = max(0, int(retries))
        self.retry_temperature = float(retry_temperature)
        self.cache = cache if cache is not None else NullCache()
        self.counts = {"examples": 0, "failures": 0, "retried": 0, "recovered_by_retry": 0,
                       "engine_errors": 0, "cache_hits": 0}

    @property
    def prompt_hash(self) -> str:
        return self.prompt_template.hash

    def prompt(self, view: View) -> str:
        fields = {"question": view.question, "context": view.context() or NO_POSTS,
                  "max_aspects": str(self.max_aspects)}
        return self.prompt_template.render(**{k: v for k, v in fields.items() if k in self.prompt_template.fields})

    def _params(self, seed: int, attempt: int) -> GenParams:
        return judge_params(self.engine, self.max_new_tokens, self.temperature, self.retry_temperature, seed, attempt)

    def _generate(self, prompts: list[str], params: list[GenParams]) -> list[tuple[str, str | None]]:
        """(text, error) per prompt; successful generations are cached by content."""
        fp = self.engine.fingerprint()
        keys = [content_key("planner", fp, p, gp.as_dict()) for p, gp in zip(prompts, params)]
        hits = self.cache.get_many(keys)
        self.counts["cache_hits"] += len(hits)
        todo = [i for i, k in enumerate(keys) if k not in hits]
        out: list[tuple[str, str | None]] = [(hits[k], None) if k in hits else ("", None) for k in keys]
        if todo:
            gens = self.engine.generate([[{"role": "user", "content": prompts[i]}] for i in todo],
                                        [params[i] for i in todo])
            store = {}
            for i, g in zip(todo, gens):
                out[i] = (g.text, g.error)
                if not g.error:
                    store[keys[i]] = g.text
            self.cache.put_many(store)
        return out

    def plan_views(self, views: Sequence[View], seeds: Sequence[int]) -> list[PlanOutcome]:
        """Plans for a batch of views (one engine call, plus one for the retries)."""
        prompts = [self.prompt(v) for v in views]
        outcomes: list[PlanOutcome | None] = [None] * len(views)
        todo = list(range(len(views)))
        for attempt in range(self.retries + 1):
            if not todo:
                break
            if attempt:
                self.counts["retried"] += len(todo)
            gens = self._generate([prompts[i] for i in todo], [self._params(seeds[i], attempt) for i in todo])
            still = []
            for i, (text, error) in zip(todo, gens):
                vid = views[i].example_id
                if error:
                    outcomes[i] = PlanOutcome(vid, [], failed=f"engine: {error}", attempts=attempt + 1)
                    continue
                aspects = parse_aspects(text, self.max_aspects)
                if aspects is None:
                    outcomes[i] = PlanOutcome(vid, [], failed="parse failure", attempts=attempt + 1,
                                              raw=clip_raw(text))
                    still.append(i)
                else:
                    outcomes[i] = PlanOutcome(vid, aspects, attempts=attempt + 1)
                    if attempt:
                        self.counts["recovered_by_retry"] += 1
            todo = still
        done = [o for o in outcomes if o is not None]
        self.counts["examples"] += len(done)
        self.counts["failures"] += sum(1 for o in done if o.failed)
        self.counts["engine_errors"] += sum(1 for o in done if o.failed and o.failed.startswith("engine"))
        return done

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"planner": self.spec, "prompt_hash": self.prompt_hash,
                               "engine": self.engine.fingerprint(), **self.counts}
        if self.ignored_options:
            out["ignored_options"] = self.ignored_options
        return out


# ---------------------------------------------------------------------------------------------
# Training a planner (SFT, LoRA by default)
# ---------------------------------------------------------------------------------------------


def planner_sft_rows(items: Sequence[SourceItem], *, top_k: int = 10, retriever: str | Retriever = "bm25",
                     max_aspects: int = MAX_ASPECTS, prompt_file: str | None = None,
                     cache: Cache | None = None) -> list[dict[str, Any]]:
    """Prompt-completion chat rows: the planner prompt -> the item's true rubric, rendered.

    Items without rubric aspects are skipped (nothing to learn from).
    """
    ret = load_retriever(retriever) if isinstance(retriever, str) else retriever
    template = load_prompt("planner", prompt_file)
    rows = []
    for ex in items:
        aspects = [a for a in ex.rubric_aspects if a.aspect.strip()][:max_aspects]
        if not aspects:
            continue
        view = planner_view(ex, ret, top_k, cache)
        fields = {"question": view.question, "context": view.context() or NO_POSTS, "max_aspects": str(max_aspects)}
        prompt = template.render(**{k: v for k, v in fields.items() if k in template.fields})
        rows.append({"prompt": [{"role": "user", "content": prompt}],
                     "completion": [{"role": "assistant", "content": render_aspects(aspects)}]})
    return rows


def _resolve_model(base_model: str) -> str:
    if base_model.startswith("builtin:"):
        from prbench.engines.builtin import builtin_path

        return str(builtin_path(base_model))
    return base_model.removeprefix("hf:")


def _lora_config(r: int, alpha: int, dropout: float) -> Any:
    """LoRA adapters on every linear layer (merged into the weights before saving)."""
    from prbench.runtime.extras import require

    peft = require("peft", "train")
    return peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules="all-linear",
                           task_type="CAUSAL_LM")


def _load_base(transformers: Any, torch: Any, source: str) -> tuple[Any, Any]:
    """The base model's tokenizer (padding with EOS when it has no pad token) and float32 weights."""
    tok = transformers.AutoTokenizer.from_pretrained(source)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)


def _save_planner(model: Any, tok: Any, out_dir: Path) -> None:
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def train_planner(
    base_model: str,
    data: str | Sequence[SourceItem],
    out: str | Path,
    *,
    steps: int = 200,
    lora: bool = True,
    top_k: int = 10,
    retriever: str = "bm25",
    learning_rate: float | None = None,
    batch_size: int = 4,
    grad_accum: int = 1,
    max_length: int = 2048,
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.05,
    max_aspects: int = MAX_ASPECTS,
    prompt_file: str | None = None,
    seed: int = 0,
    limit: int | None = None,
    split: str = "train",
    device: str = "auto",
) -> dict[str, Any]:
    """SFT a planner on LaMP-QA-form items; saves an HF folder at `out` (usable as `hf:<out>`).

    Loss is on the completion (the rendered rubric) only. With `lora`, adapters are trained
    on every linear layer and merged into the weights before saving, so the folder needs no
    peft to load. Returns training facts (also written to `out/prbench_planner.json`).
    """
    from prbench.data import load_examples
    from prbench.runtime.extras import require
    from prbench.train import end_ranks, is_main_process, pin_device, rank, single_process_args

    torch = require("torch", "hf")
    transformers = require("transformers", "hf")
    trl = require("trl", "train")
    device = pin_device(device)  # one GPU without a launcher (TRL refuses n_gpu > 1)
    items = (load_examples(data, "source", limit=limit, split=split) if isinstance(data, str)
             else list(data)[:limit])
    rows = planner_sft_rows(items, top_k=top_k, retriever=retriever, max_aspects=max_aspects,
                            prompt_file=prompt_file)
    if not rows:
        raise PrbenchError("no training items with rubric aspects in the planner training data")
    datasets = require("datasets", "train")
    train_ds = datasets.Dataset.from_list(rows)
    tok, model = _load_base(transformers, torch, _resolve_model(base_model))
    use_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    out_dir = Path(out)
    work = out_dir.parent / f".{out_dir.name}.trainer"
    lr = learning_rate if learning_rate is not None else (2e-4 if lora else 2e-5)
    args = trl.SFTConfig(
        output_dir=str(work), max_steps=int(steps), learning_rate=lr, per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum, max_length=max_length, completion_only_loss=True,
        logging_steps=max(1, int(steps) // 10), save_strategy="no", report_to="none", seed=seed,
        use_cpu=use_cpu, bf16=False, fp16=False, disable_tqdm=True, lr_scheduler_type="constant",
        warmup_steps=0,
    )
    single_process_args(args)
    peft_config = _lora_config(lora_r, lora_alpha, lora_dropout) if lora else None
    started = time.perf_counter()
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=train_ds, processing_class=tok,
                             peft_config=peft_config)
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # it prints every log to stdout (--json)
    result = trainer.train()
    end_ranks()
    if not is_main_process():  # a launched run's other ranks: rank 0 writes the planner
        return {"rank": rank()}
    _save_planner(trainer.model.merge_and_unload() if lora else trainer.model, tok, out_dir)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    facts = {
        "base_model": base_model, "steps": int(steps), "lora": lora, "learning_rate": lr,
        "train_items": len(rows), "top_k": top_k, "retriever": retriever, "max_aspects": max_aspects,
        "prompt_hash": load_prompt("planner", prompt_file).hash, "seed": seed,
        "first_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "train_loss": float(result.training_loss) if math.isfinite(result.training_loss) else None,
        "seconds": round(time.perf_counter() - started, 2),
    }
    (out_dir / "prbench_planner.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    return facts
