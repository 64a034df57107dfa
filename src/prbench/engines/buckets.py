"""Batch-invariant batching: a sequence's numbers depend on its own tokens, never on its neighbours.

A float32 forward pass is exact arithmetic only up to its reduction order, and the order follows
the tensor shapes: the padded width decides how attention and pooling sum over positions (MiniLM,
one text padded to 54 or 64 tokens: embeddings 1.4e-6 apart). So each sequence is padded to a
width fixed by its OWN length (`bucket_width`), and only sequences of one width share a batch.

The row count is the other shape. On a CPU, MKL picks its matmul kernel by the number of rows
(tokens x sequences), so prbench's CPU models multiply in fixed chunks of rows
(`prbench.engines.fixed_gemm`); with that, a row's numbers depend on its own values only,
whatever the batch holds. Widths stay multiples of 8 and an encoder classifier's pooled rows
are rounded to whole 8-row tiles (`ROW_TILE`), as before. GPU libraries pick kernels by the row
count too, so off the CPU every batch is padded to a fixed row count with filler rows
(`fixed_rows`), which a GPU runs at almost no cost. Checked in `tests/test_batch_invariance.py`
on MiniLM and decoder RMs, masked and unmasked, at batch sizes 1, 7 and 64 in mixed
compositions.

Compared with padding to the longest in a batch of sorted lengths, buckets cost at most one
step of padding per sequence (16 buckets per doubling of length, at least 8 tokens apart:
at most 12.5% of a sequence's tokens, about 6% on average); `benchmarks/invariance.py`
measures the whole effect against one-at-a-time and plain batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_STEP = 8  # tokens between bucket widths for short sequences (every width a multiple of ROW_TILE)
ROW_TILE = 8  # rows MKL's float32 matmul computes as one tile
STEPS_PER_DOUBLING = 16
KV_STEPS_PER_DOUBLING = 4  # the coarser grid of a prompt's cache as its responses read it (see kv_width)


def bucket_width(n: int, steps: int = STEPS_PER_DOUBLING) -> int:
    """The padded width of an `n`-token sequence: n rounded up to its bucket's step (8 for short n, then 1/`steps` of the next power of two)."""
    if n < 1:
        raise ValueError(f"a sequence needs at least one token, not {n}")
    step = max(MIN_STEP, (1 << (n - 1).bit_length()) // steps)
    return -(-n // step) * step


def kv_width(width: int) -> int:
    """Columns of a prompt's KV cache as its responses attend to it: its padded width on a coarser grid (4 per doubling).

    Why coarser: responses can share a batch only if their caches have one width, and a
    response pass spends the extra (masked) columns only in attention, never in the linear
    layers, so a coarse grid buys fuller response batches for little work. Never below `width`.
    """
    return bucket_width(width, KV_STEPS_PER_DOUBLING)


@dataclass(frozen=True)
class Batch:
    """Indices of sequences that share one padded width (`width`), and the row count to pad to."""

    width: int
    index: list[int]
    rows: int  # == len(index) on a CPU; the fixed row count (filler rows appended) elsewhere


def bucketed_batches(lengths: Sequence[int], token_budget: int, max_rows: int,
                     fixed_rows: bool = False, row_multiple: int = 1) -> list[Batch]:
    """Batches of equal bucket width, each at most `max_rows` rows and `token_budget` padded tokens (one row at least).

    Deterministic: widths ascending, indices ascending within a width. With `fixed_rows`, every
    batch of a width has the same row count (its capacity), so its shape never depends on how
    many sequences came with it; else the row count is rounded up to `row_multiple`.
    """
    by_width: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_width.setdefault(bucket_width(n), []).append(i)
    out = []
    for width in sorted(by_width):
        cap = max(1, min(max_rows, token_budget // width))
        index = by_width[width]
        for start in range(0, len(index), cap):
            chunk = index[start:start + cap]
            out.append(Batch(width, chunk, cap if fixed_rows else -(-len(chunk) // row_multiple) * row_multiple))
    return out


def pads_rows(device: object) -> bool:
    """True where batches get a fixed row count: every device but the CPU (see the module doc)."""
    return not str(device).startswith("cpu")
