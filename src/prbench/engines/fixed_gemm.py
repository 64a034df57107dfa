"""Linear layers that multiply a fixed number of rows at a time, so a row's result never depends on how many rows came with it.

Why: on a CPU, MKL picks its float32 matmul kernel (and how it splits the sum over the inner
dimension across threads) by the matrix shape. torch 2.13, MKL 2024.2, AVX-512, measured on
this project's VM: a 1536 -> 576 layer (SmolLM2's and MiniLM's MLP down-projection) gives one
set of bits for 64-192 rows, another for 16-56 and 200-4096 rows with 2 threads; with 1 thread,
8 rows differ from 16+. So a token of a lone 100-token sequence and the same token in a batch of
eight are summed differently, and length buckets alone cannot make scores batch-invariant.
Multiplying in windows of a fixed row count (the last one overlapping or zero-padded) gives every
call one shape; a row's result then depends only on its own values and that count (checked in
`tests/test_batch_invariance.py`, at 1 and 2 threads).

The row count: inside `sequence_windows(width)` (prbench's bucketed passes, where `width` is the
padded width, a function of each sequence's own length), a [rows, width, features] input is
multiplied one sequence per window (short ones several, to SEQUENCE_ROWS rows): a pass then pads
nothing, or less than SEQUENCE_ROWS rows, where 256-row windows padded up to 255 rows per layer
call (18% of SmolLM2's rows under `profile`, `benchmarks/RESULTS_invariance.md`). Anything else
(pooled rows, a model that folds its batch into one row) gets GEMM_ROWS rows per window.

Only CPU models are patched: on a GPU, `prbench.engines.buckets` pads every batch of a width to a
fixed row count instead, which costs little there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

GEMM_ROWS = 256  # rows per matmul: a power of two (whole kernel tiles), large enough to keep 2 cores' GEMMs efficient
SEQUENCE_ROWS = 64  # at least this many rows per window of whole sequences (short sequences go several to a window)
GEMM_RULE = f"sequences-{SEQUENCE_ROWS}-else-{GEMM_ROWS}"  # the shape rule, for fingerprints and cache keys
ALIGN = 64  # bytes: MKL may take another path for unaligned data, so a window that is not aligned is copied


def linear_in_fixed_rows(torch: Any, x: Any, weight: Any, bias: Any, rows: int = GEMM_ROWS) -> Any:
    """`torch.nn.functional.linear(x, weight, bias)` computed in windows of exactly `rows` rows.

    Windows start at 0, `rows`, 2 * `rows`, ...; the rows past the last whole one are computed in
    the window that ends at the last row (it overlaps the one before and rewrites some of its rows
    with the same bits: the invariant itself), or with fewer than `rows` rows in all, zero-padded.
    An aligned window is written straight into the result (`torch.addmm(..., out=)`, the call
    `F.linear` makes for 2-D input), so it copies nothing; an unaligned one goes through a copy.
    """
    flat = x.reshape(-1, x.shape[-1])
    m, k = flat.shape
    out = flat.new_empty((m, weight.shape[0]))
    wt = weight.t()

    def multiply(start: int, n: int) -> None:
        """Rows [start, start + n) of the result, from a matmul of exactly `rows` rows."""
        part, dest = flat[start:start + rows], out[start:start + rows]
        if n == rows and part.is_contiguous() and not (part.data_ptr() % ALIGN or dest.data_ptr() % ALIGN):
            if bias is None:
                torch.mm(part, wt, out=dest)
            else:
                torch.addmm(bias, part, wt, out=dest)
        else:  # short or unaligned: a zero-padded, freshly allocated (so aligned) copy
            buf = flat.new_zeros((rows, k))
            buf[:n] = flat[start:start + n]
            out[start:start + n] = torch.nn.functional.linear(buf, weight, bias)[:n]

    whole = m - m % rows
    for start in range(0, whole, rows):
        multiply(start, rows)
    if whole < m and m > rows:  # the rest: in the window ending at the last row
        multiply(m - rows, rows)
    elif whole < m:  # fewer rows than one window: all of them, padded
        multiply(0, m)
    return out.reshape(*x.shape[:-1], weight.shape[0])


_WIDTH: ContextVar[int] = ContextVar("prbench_sequence_width", default=0)


@contextmanager
def sequence_windows(width: int) -> Iterator[None]:
    """Within: a patched layer given [rows, `width`, features] multiplies whole sequences per window (`window_rows`)."""
    token = _WIDTH.set(width)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def window_rows(shape: tuple[int, ...]) -> int:
    """Rows per matmul for an input of `shape`: whole sequences, one (`width` rows) or as many as make SEQUENCE_ROWS,
    for [rows, width, features] inside `sequence_windows(width)`; else GEMM_ROWS (a pooled [rows, features] input,
    or a model that folds its batch into one long row: its row count is not the sequence's own)."""
    width = _WIDTH.get()
    if width and len(shape) == 3 and shape[1] == width:
        return width * max(1, SEQUENCE_ROWS // width)
    return GEMM_ROWS


def fix_gemm_rows(model: Any) -> int:
    """Make every `torch.nn.Linear` in `model` multiply in fixed row chunks (idempotent); returns how many were patched."""
    import types

    import torch

    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and not getattr(module, "_prbench_fixed_rows", False):
            # an instance's own forward: the class (and every other model's Linear layers) stay as they are
            module.forward = types.MethodType(_fixed_forward, module)  # type: ignore[method-assign]  # on purpose
            module.__dict__["_prbench_fixed_rows"] = True  # a plain flag, not a parameter or submodule
            count += 1
    return count


def unfix_gemm_rows(model: Any) -> None:
    """Undo `fix_gemm_rows` (benchmarks compare against the library's own batching)."""
    for module in model.modules():
        if getattr(module, "_prbench_fixed_rows", False):
            del module.forward
            module._prbench_fixed_rows = False


def _fixed_forward(self: Any, x: Any) -> Any:
    import torch

    return linear_in_fixed_rows(torch, x, self.weight, self.bias, window_rows(tuple(x.shape)))
