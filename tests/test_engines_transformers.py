"""TransformersEngine on tiny random models: tokenization, batch invariance, seeding, stops, scores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from prbench.engines.base import GenParams, load_engine
from prbench.engines.transformers_engine import TransformersEngine, split_continuation
from prbench.errors import PrbenchError
from prbench.testing.tiny import BOS, make_tiny_causal_lm

PROMPTS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a reward model?"}],
    [{"role": "user", "content": "Tell me about film photography and pushing HP5 to 1600."}],
    [{"role": "user", "content": "x"}],
    [{"role": "user", "content": "Plan a week of vegetarian dinners, please, with a shopping list."}],
    [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh."},
        {"role": "user", "content": "More."},
    ],
]


# -- tiny models ---------------------------------------------------------------------------------


def test_tiny_models_load_through_from_pretrained(tiny_lm, tiny_lm_qwen2, tiny_lm_plain, tiny_rm) -> None:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    for path in (tiny_lm, tiny_lm_qwen2, tiny_lm_plain):
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        assert model.config.vocab_size == len(tok)
        assert tok.bos_token == BOS
        assert (path / "model.safetensors").is_file()
        assert sum(f.stat().st_size for f in path.iterdir()) < 1_000_000
    assert AutoTokenizer.from_pretrained(tiny_lm).chat_template
    plain = AutoTokenizer.from_pretrained(tiny_lm_plain)
    assert not plain.chat_template and plain.pad_token is None
    assert AutoModelForCausalLM.from_pretrained(tiny_lm_plain).config.pad_token_id is None
    rm = AutoModelForSequenceClassification.from_pretrained(tiny_rm)
    assert rm.config.num_labels == 1 and rm.config.pad_token_id is not None


def test_tiny_models_deterministic_by_seed(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a = load_file(make_tiny_causal_lm(tmp_path / "a", seed=7) / "model.safetensors")
    b = load_file(make_tiny_causal_lm(tmp_path / "b", seed=7) / "model.safetensors")
    c = load_file(make_tiny_causal_lm(tmp_path / "c", seed=8) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


# -- tokenization ---------------------------------------------------------------------------------


def test_no_double_bos(tiny_engine) -> None:
    bos = tiny_engine.tokenizer.convert_tokens_to_ids(BOS)
    for messages in PROMPTS:
        ids = tiny_engine.encode_chat(messages, add_generation_prompt=True)
        assert ids[0] == bos and ids.count(bos) == 1
    # The trap the engine avoids: tokenizing the rendered template with special tokens again.
    text = tiny_engine.tokenizer.apply_chat_template(PROMPTS[0], add_generation_prompt=True, tokenize=False)
    assert tiny_engine.tokenizer(text)["input_ids"][:2] == [bos, bos]


def test_plain_format_and_pad_fallback(tiny_lm_plain) -> None:
    engine = TransformersEngine(str(tiny_lm_plain), device="cpu", batch_size=4)
    tok = engine.tokenizer
    assert tok.pad_token == tok.eos_token  # documented fallback
    ids = engine.encode_chat(PROMPTS[1], True)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert (
        tok.decode(ids, skip_special_tokens=True)
        == "System: Be brief.\nUser: What is a reward model?\nAssistant: "
    )
    batched = engine.generate(PROMPTS, GenParams(max_new_tokens=6))
    single = [engine.generate([p], GenParams(max_new_tokens=6))[0] for p in PROMPTS]
    assert [g.text for g in batched] == [g.text for g in single]


def test_split_continuation_prefix(tiny_engine) -> None:
    prompt, cont, ok = split_continuation(tiny_engine.tokenizer, PROMPTS[0], " A cat.")
    assert ok and prompt == tiny_engine.encode_chat(PROMPTS[0], True)
    assert tiny_engine.tokenizer.decode(cont) == " A cat."


# -- generation --------------------------------------------------------------------------------


def test_greedy_batched_equals_unbatched(tiny_engine) -> None:
    params = GenParams(max_new_tokens=10)
    batched = tiny_engine.generate(PROMPTS, params)
    single = [tiny_engine.generate([p], params)[0] for p in PROMPTS]
    assert [(g.text, g.n_tokens, g.finish_reason) for g in batched] == [
        (g.text, g.n_tokens, g.finish_reason) for g in single
    ]
    assert all(g.n_tokens is not None and g.n_tokens <= 10 for g in batched)
    assert all(g.finish_reason in ("stop", "length") for g in batched)


def test_greedy_is_plain_argmax_whatever_the_checkpoint_defaults(tmp_path) -> None:
    from transformers import GenerationConfig

    path = make_tiny_causal_lm(tmp_path / "opinionated", seed=3)
    engine = TransformersEngine(str(path), device="cpu")
    # A checkpoint whose own generation config would sample and penalise if it leaked in.
    engine.model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=5.0,
        top_k=1,
        repetition_penalty=5.0,
        no_repeat_ngram_size=1,
        eos_token_id=engine.eos_ids,
        pad_token_id=engine.pad_id,
    )
    ids = engine.encode_chat(PROMPTS[1], True)
    manual: list[int] = []
    with torch.no_grad():
        for _ in range(8):
            nxt = int(engine.model(input_ids=torch.tensor([ids + manual])).logits[0, -1].argmax())
            if nxt in engine.eos_ids:
                break
            manual.append(nxt)
    gen = engine.generate([PROMPTS[1]], GenParams(max_new_tokens=8))[0]
    assert gen.text == engine.tokenizer.decode(manual, skip_special_tokens=True)
    assert engine.model.generation_config.repetition_penalty == 5.0  # restored after the call


def test_greedy_batch_invariance_qwen2_with_repetition_penalty(tiny_lm_qwen2) -> None:
    engine = TransformersEngine(str(tiny_lm_qwen2), device="cpu", batch_size=3)
    params = GenParams(max_new_tokens=8, repetition_penalty=1.3)
    batched = engine.generate(PROMPTS, params)
    single = [engine.generate([p], params)[0] for p in PROMPTS]
    assert [g.text for g in batched] == [g.text for g in single]
    plain = engine.generate(PROMPTS[:1], GenParams(max_new_tokens=8))
    assert plain[0].text  # penalty path and plain greedy both produce text


def test_sampling_seeded_and_batch_independent(tiny_engine) -> None:
    sampled = [
        GenParams(max_new_tokens=8, temperature=1.0, top_p=0.9, top_k=50, seed=100 + i) for i in range(6)
    ]
    mixed = [GenParams(max_new_tokens=8) if i % 2 else p for i, p in enumerate(sampled)]  # greedy rows too
    a = tiny_engine.generate(PROMPTS, mixed)
    b = tiny_engine.generate(PROMPTS, mixed)
    assert [g.text for g in a] == [g.text for g in b]
    alone = [tiny_engine.generate([PROMPTS[i]], mixed[i])[0] for i in range(6)]
    assert [g.text for g in a] == [g.text for g in alone]
    reordered = tiny_engine.generate(PROMPTS[::-1], mixed[::-1])[::-1]
    assert [g.text for g in a] == [g.text for g in reordered]
    # Different seeds for the same prompt give different samples (Best-of-N needs that).
    many = tiny_engine.generate(
        [PROMPTS[2]] * 6, [GenParams(max_new_tokens=8, temperature=1.0, seed=s) for s in range(6)]
    )
    assert len({g.text for g in many}) > 1


def test_stop_strings_truncate(tiny_engine) -> None:
    full = tiny_engine.generate([PROMPTS[2]], GenParams(max_new_tokens=16))[0]
    printable = [i for i, ch in enumerate(full.text) if ch.isprintable() and ch != "\ufffd" and i > 0]
    assert printable, f"tiny model produced no printable character: {full.text!r}"
    cut = printable[len(printable) // 2]
    stop = full.text[cut]
    stopped = tiny_engine.generate([PROMPTS[2]], GenParams(max_new_tokens=16, stop=(stop, "never-there")))[0]
    assert stopped.finish_reason == "stop"
    assert stop not in stopped.text
    assert full.text.startswith(stopped.text)
    assert stopped.text == full.text[: full.text.index(stop)]


def test_max_new_tokens_and_length_finish(tiny_engine) -> None:
    gens = tiny_engine.generate(PROMPTS[:3], [GenParams(max_new_tokens=n) for n in (1, 3, 5)])
    for g, n in zip(gens, (1, 3, 5)):
        assert g.n_tokens is not None and g.n_tokens <= n
        if g.finish_reason == "length":
            assert g.n_tokens == n
    longer = tiny_engine.generate(PROMPTS[2:3], GenParams(max_new_tokens=5))[0]
    assert longer.text == gens[2].text  # per-row limits inside one batch are exact
    assert tiny_engine.generate(PROMPTS[:1], GenParams(max_new_tokens=0))[0].text == ""


def test_truncation_is_counted(tiny_lm) -> None:
    engine = TransformersEngine(str(tiny_lm), device="cpu", max_length=24)
    gen = engine.generate([PROMPTS[4]], GenParams(max_new_tokens=4))[0]
    assert gen.meta.get("truncated") is True and engine.stats["truncated_prompts"] == 1
    assert engine.generate([PROMPTS[3]], GenParams(max_new_tokens=4))[0].meta.get("truncated") is None


# -- scoring ----------------------------------------------------------------------------------


def _manual_loglik(engine: TransformersEngine, messages, continuation: str) -> list[float]:
    prompt, cont, _ = split_continuation(engine.tokenizer, messages, continuation)
    ids = torch.tensor([prompt + cont])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits.float()
    logprobs = torch.log_softmax(logits[0, :-1], dim=-1)
    targets = ids[0, 1:]
    picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked[len(prompt) - 1 :].tolist()


def test_loglik_batched_equals_single_and_manual(tiny_engine) -> None:
    conts = ["Sure.", " A long answer about cameras and film.", "B", "ok", "Mild curry, rice, lentils.", ""]
    requests = list(zip(PROMPTS, conts))
    batched = tiny_engine.loglik(requests)
    single = [tiny_engine.loglik([r])[0] for r in requests]
    for b, s, (m, c) in zip(batched, single, requests):
        assert len(b) == len(s) == len(split_continuation(tiny_engine.tokenizer, m, c)[1])
        assert all(abs(x - y) < 1e-4 for x, y in zip(b, s))
        manual = _manual_loglik(tiny_engine, m, c) if c else []
        assert all(abs(x - y) < 1e-4 for x, y in zip(b, manual))
        assert all(x <= 0 for x in b)
    assert batched[-1] == []


def test_choice_logprobs_fold_and_batch_invariance(tiny_engine) -> None:
    tok = tiny_engine.tokenizer
    res = tiny_engine.choice_logprobs(PROMPTS, ["A", "B"])
    single = [tiny_engine.choice_logprobs([p], ["A", "B"])[0] for p in PROMPTS]
    for r, s in zip(res, single):
        assert abs(r["A"] - s["A"]) < 1e-4 and abs(r["B"] - s["B"]) < 1e-4
    ids = torch.tensor([tiny_engine.encode_chat(PROMPTS[1], True)])
    with torch.no_grad():
        lp = torch.log_softmax(tiny_engine.model(input_ids=ids).logits[0, -1].float(), dim=-1)
    # "A" and " A" are both single tokens in the tiny vocabulary.
    a_ids = [tok.convert_tokens_to_ids("A"), tok.convert_tokens_to_ids("ĠA")]
    expected = float(torch.logsumexp(lp[a_ids], dim=0))
    assert abs(res[1]["A"] - expected) < 1e-4
    with pytest.raises(PrbenchError):
        tiny_engine.choice_logprobs(PROMPTS[:1], ["AB"])


def test_fingerprint_and_load_engine(tiny_lm, tmp_path) -> None:
    engine = load_engine(f"hf:{tiny_lm}", device="cpu")
    fp = engine.fingerprint()
    assert fp["dtype"] == "float32" and len(fp["chat_template_sha256"]) == 64 and fp["weights"]
    json.dumps(fp)
    other = TransformersEngine(str(make_tiny_causal_lm(tmp_path / "other", seed=99)), device="cpu")
    assert other.fingerprint()["weights"] != fp["weights"]
    assert engine.model is not None and engine.tokenizer is not None
    assert not math.isnan(engine.loglik([(PROMPTS[0], "hi")])[0][0])
