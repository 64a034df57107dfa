"""Figures for the HTML report, rendered with matplotlib's Agg backend to PNG bytes.

PNG (embedded as a base64 data URI) keeps the report one file that any browser shows offline.
matplotlib is the `report` extra: without it every function returns None and the report says
so instead of failing, because the tables carry all the numbers anyway.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

# Colour-blind-safe palette (Okabe-Ito), one colour per condition / RM.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CONDITION_COLORS = {"none": "#7f8c99", "profile": "#0072B2", "planner": "#009E73", "oracle": "#E69F00",
                    "wrong-profile": "#CC79A7"}
DPI = 110


def available() -> bool:
    """Whether matplotlib can be imported (the `report` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "font.family": "DejaVu Sans", "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e5e7eb",
        "grid.linewidth": 0.8, "axes.axisbelow": True, "legend.frameon": False, "legend.fontsize": 8,
        "svg.hashsalt": "prbench", "path.simplify": True,
    })
    return plt


def _png(fig: Any) -> bytes:
    """Bytes of a tight PNG (no timestamp metadata, so identical inputs give identical bytes)."""
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def short_name(name: str, width: int = 28) -> str:
    """A model name that fits under a bar: drop a hub owner and the `builtin:` tag, cut long tails."""
    core = name.replace("builtin:", "")
    for prefix in ("hf:", "judge:", "pmi:"):
        if core.startswith(prefix) and "/" in core:
            core = prefix + core.rsplit("/", 1)[1]
    return core if len(core) <= width else core[: width - 1] + "\u2026"


def tick_label(name: str) -> str:
    """A bar's x label: the whole name (hub owner and `builtin:` dropped), in lines broken after ':' or '/'."""
    from prbench.leaderboard import wrap_name

    return wrap_name(short_name(name, 10**6), 18)


def grouped_bars(
    models: Sequence[str],
    groups: Sequence[str],
    values: Mapping[tuple[str, str], tuple[float | None, float | None, float | None]],
    *,
    ylabel: str,
    chance: float | None = None,
    colors: Mapping[str, str] | None = None,
) -> bytes | None:
    """Bars per model (x) and group (hue) with CI whiskers; `values[(model, group)] = (value, lo, hi)`."""
    if not available() or not models or not groups:
        return None
    return _png(bars_figure(models, groups, values, ylabel=ylabel, chance=chance, colors=colors))


def bars_figure(
    models: Sequence[str],
    groups: Sequence[str],
    values: Mapping[tuple[str, str], tuple[float | None, float | None, float | None]],
    *,
    ylabel: str,
    chance: float | None = None,
    colors: Mapping[str, str] | None = None,
) -> Any:
    """The figure of `grouped_bars`. Each model's slot is as wide as its longest label line (9 pt DejaVu Sans:
    ~0.075 inch a character) so labels sit side by side, whole and unrotated, never overlapping or cut."""
    plt = _plt()
    import numpy as np

    labels = [tick_label(m) for m in models]
    longest = max(len(line) for lab in labels for line in lab.split("\n"))
    slot = max(0.45 * max(1, len(groups)), 0.075 * longest + 0.35)
    width = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(max(6.0, slot * len(models) + 1.6), 3.4 + 0.15 * max(
        lab.count("\n") for lab in labels)))
    x = np.arange(len(models))
    for j, g in enumerate(groups):
        vals, err_lo, err_hi = [], [], []
        for m in models:
            v, lo, hi = values.get((m, g), (None, None, None))
            vals.append(np.nan if v is None else v)
            err_lo.append(0.0 if v is None or lo is None else max(0.0, v - lo))
            err_hi.append(0.0 if v is None or hi is None else max(0.0, hi - v))
        color = (colors or {}).get(g, PALETTE[j % len(PALETTE)])
        ax.bar(x + (j - (len(groups) - 1) / 2) * width, vals, width * 0.92, label=g, color=color,
               yerr=[err_lo, err_hi], capsize=2, error_kw={"elinewidth": 0.9, "ecolor": "#333"})
    if chance is not None:
        ax.axhline(chance, color="#999", linestyle="--", linewidth=0.9)
        ax.annotate("chance", (-0.5, chance), xytext=(2, 2), textcoords="offset points", fontsize=7,
                    color="#777", ha="left", va="bottom")
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, ha="center")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.legend(ncol=min(len(groups), 5), loc="upper center", bbox_to_anchor=(0.5, 1.14))
    return fig


def bon_curves(
    ks: Sequence[int],
    curves: Mapping[str, tuple[Sequence[float], Sequence[float | None], Sequence[float | None]]],
    *,
    oracle: Sequence[float] | None = None,
    random: Sequence[float] | None = None,
    ylabel: str = "rubric grade (0-2)",
    title: str = "",
    colors: Mapping[str, str] | None = None,
) -> bytes | None:
    """Best-of-N curves (value vs k, log2 axis) with CI bands per RM, plus oracle and random references.

    `colors` fixes each RM's colour so the same RM looks the same in every chart.
    """
    if not available() or not curves:
        return None
    plt = _plt()
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.6, 3.6))
    for j, (name, (mean, lo, hi)) in enumerate(curves.items()):
        color = (colors or {}).get(name, PALETTE[j % len(PALETTE)])
        kk = list(ks)[: len(mean)]
        ax.plot(kk, mean, marker="o", markersize=3, linewidth=1.4, color=color, label=short_name(name))
        if all(v is not None for v in lo) and all(v is not None for v in hi):
            ax.fill_between(kk, np.asarray(lo, float), np.asarray(hi, float), color=color, alpha=0.13, linewidth=0)
    if oracle is not None:
        ax.plot(list(ks)[: len(oracle)], oracle, color="#222", linestyle="--", linewidth=1.1, label="oracle (best)")
    if random is not None:
        ax.plot(list(ks)[: len(random)], random, color="#888", linestyle=":", linewidth=1.3, label="random pick")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ks))
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("k (candidates the RM chooses from)")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def scatter_panels(
    panels: Sequence[Mapping[str, Any]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    max_cols: int = 4,
    colors: Mapping[str, str] | None = None,
) -> bytes | None:
    """Small multiples: per panel, one point per RM (benchmark score vs downstream score), labelled.

    Each panel: {"title": str, "points": {rm: (x, y)}, "subtitle": str}.
    """
    panels = [p for p in panels if p.get("points")]
    if not available() or not panels:
        return None
    plt = _plt()

    cols = min(max_cols, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.1 * cols + 0.4, 2.8 * rows + 0.3), squeeze=False)
    names = sorted({rm for p in panels for rm in p["points"]})
    color = {rm: (colors or {}).get(rm, PALETTE[i % len(PALETTE)]) for i, rm in enumerate(names)}
    for idx, panel in enumerate(panels):
        ax = axes[idx // cols][idx % cols]
        pts = [(rm, x, y) for rm, (x, y) in panel["points"].items() if x is not None and y is not None]
        for rm, x, y in pts:
            ax.scatter([x], [y], s=22, color=color[rm], zorder=3)
        for rm, x, y, dy, right_half in _label_offsets(pts):
            ax.annotate(short_name(rm, 18), (x, y), xytext=(-4 if right_half else 4, 3 - dy), textcoords="offset points",
                        fontsize=6.5, color="#333", ha="right" if right_half else "left")
        ax.set_title(panel["title"], loc="left", fontsize=9)
        if panel.get("subtitle"):
            ax.text(0.02, 0.02, panel["subtitle"], transform=ax.transAxes, fontsize=7, color="#555")
        ax.margins(0.18)
        if idx % cols == 0:
            ax.set_ylabel(ylabel)
        if idx // cols == rows - 1:
            ax.set_xlabel(xlabel)
    for idx in range(len(panels), rows * cols):
        axes[idx // cols][idx % cols].set_visible(False)
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def _label_offsets(pts: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float, float, bool]]:
    """(rm, x, y, downward offset in points, label to the left): labels point inwards, so the panel's edge never
    cuts them, and a label whose box would overlap one already placed moves down a line."""
    if not pts:
        return []
    xs = [p[1] for p in pts]
    ys = [p[2] for p in pts]
    xr = (max(xs) - min(xs)) or 1.0
    yr = (max(ys) - min(ys)) or 1.0
    placed: list[tuple[float, float, float, float]] = []  # label box x0, x1 (normalised), point y, offset
    out = []
    for rm, x, y in sorted(pts, key=lambda p: (-p[2], p[1], p[0])):
        nx, ny = (x - min(xs)) / xr, (y - min(ys)) / yr
        left = nx > 0.5
        width = 0.03 * len(short_name(rm, 18))  # 6.5 pt text in a ~3 inch panel, as a share of the data range
        x0, x1 = (nx - width, nx) if left else (nx, nx + width)
        dy = 0.0
        while any(x0 < px1 and px0 < x1 and abs((ny - py) * 60 - (dy - pd)) < 8 for px0, px1, py, pd in placed):
            dy += 8.0
        placed.append((x0, x1, ny, dy))
        out.append((rm, x, y, dy, left))
    return out

def hbars(
    labels: Sequence[str],
    values: Sequence[tuple[float | None, float | None, float | None]],
    *,
    xlabel: str,
    reference: float | None = None,
    reference_label: str = "",
    xlim: tuple[float, float] | None = (0, 100),
) -> bytes | None:
    """Horizontal bars with CI whiskers (e.g. policy accuracy per RM) and an optional reference line."""
    if not available() or not labels:
        return None
    plt = _plt()
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 0.36 * len(labels) + 1.0))
    y = np.arange(len(labels))
    v = [np.nan if a is None else a for a, _, _ in values]
    lo = [0.0 if a is None or b is None else max(0.0, a - b) for a, b, _ in values]
    hi = [0.0 if a is None or c is None else max(0.0, c - a) for a, _, c in values]
    ax.barh(y, v, xerr=[lo, hi], color=PALETTE[0], height=0.6, capsize=2, error_kw={"elinewidth": 0.9})
    if reference is not None:
        ax.axvline(reference, color="#D55E00", linestyle="--", linewidth=1)
        if reference_label:
            ax.annotate(reference_label, (reference, len(labels) - 0.4), xytext=(3, 0), textcoords="offset points",
                        fontsize=7, color="#D55E00")
    ax.set_yticks(y)
    ax.set_yticklabels([short_name(s, 40) for s in labels])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if xlim:
        ax.set_xlim(*xlim)
    return _png(fig)
