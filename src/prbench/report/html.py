"""One self-contained HTML report over a runs folder: tables, plots, meta-evaluation, provenance.

Why one file: a report gets mailed, attached and archived; it must open offline, years later,
without the runs folder. So CSS is inline, figures are base64 PNG data URIs, and no URL points
outside the file. Everything that comes from data (model names, prompts, paths) is HTML-escaped.

Every section keeps its id (`leaderboard`, `conditions`, `diagnostics`, `build`, `bon`, `rl-rgd`,
`meta`, `published`, `provenance`), so links and scripts that look for a section never break; a
section with no data is not shown as an empty placeholder but named, with its id, in one line
at the end ("Not in this report") that says what would fill it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from prbench import __version__
from prbench.context.conditions import CONDITIONS
from prbench.errors import PrbenchError
from prbench.meta import main_rows, meta_evaluate
from prbench.meta.result import MetaResult
from prbench.report.data import ReportData, collect, ev
from prbench.report.downstream import rl_rgd_section
from prbench.report.evals import conditions_section, diagnostics_section, headline, published_section
from prbench.report.meta_section import meta_section
from prbench.report.provenance import provenance_section
from prbench.report.widgets import esc, is_baseline
from prbench.runkinds import kinds

__all__ = ["SECTIONS", "ReportData", "build_report", "collect", "render"]

# The page's sections in order, ids stable. A run kind renders the section its `report_id` names (eval the
# leaderboard, build and bon their own); the downstream kinds' blocks fill "rl-rgd"; the rest are the report's own.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("leaderboard", "Leaderboard"),
    ("conditions", "Input conditions"),
    ("diagnostics", "Diagnostics"),
    ("build", "Benchmark build"),
    ("bon", "Best-of-N"),
    ("rl-rgd", "RL, RGD and policy accuracy"),
    ("meta", "Meta-evaluation"),
    ("published", "Published numbers"),
    ("provenance", "Provenance"),
)


# --------------------------------------------------------------------------- page


def _css() -> str:
    return (Path(__file__).with_name("style.css")).read_text(encoding="utf-8")


def _cards(d: ReportData, meta: MetaResult | None) -> str:
    rms = {r.key for r in d.evals}
    non_base = {r.key for r in d.evals if not is_baseline(r)}
    conds = {r.condition for r in d.evals}
    ns = sorted({ev(r).n_total for r in d.evals}) or [0]
    pairs = f"{ns[0]:,}" if len(ns) == 1 else f"{ns[0]:,}–{ns[-1]:,}"
    ds = len({(r.kind.name, r.key) for r in d.scan.of("downstream")})
    cards = [("reward models", f"{len(rms)}", f"{len(rms) - len(non_base)} baselines"),
             ("conditions", f"{len(conds)}", ", ".join(c for c in CONDITIONS if c in conds)),
             ("pairs per run", pairs, ", ".join(sorted({r.data for r in d.evals}))),
             ("downstream results", f"{ds}", "BoN / RL / RGD / policy acc."),
             ("meta rows", f"{len(main_rows(meta)) if meta else 0}", "benchmark × setting")]
    return '<div class="cards">' + "".join(
        f'<div class="card" title="{esc(t)}"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v, t in cards) + "</div>"


def _is_empty(html: str) -> bool:
    """A section whose body (after its explain paragraph) is one "no data" line and nothing else."""
    body = html.split('<p class="explain">', 1)[-1].split("</p>", 1)[-1].removesuffix("</section>").strip()
    return re.fullmatch(r'(?:<h3>[^<]*</h3>|<p class="empty">[^<]*</p>)+', body, flags=re.DOTALL) is not None


def _absent_reason(html: str) -> str:
    return " ".join(re.findall(r'<p class="empty">([^<]*)</p>', html))


def _absent(absent: list[tuple[str, str, str]]) -> str:
    """One line for the sections without data, each keeping its id (links to it still land here)."""
    items = "; ".join(f'<span id="{esc(sid)}"><b>{esc(label)}</b>: {reason}</span>' for sid, label, reason in absent)
    return f'<p class="absent">Not in this report (no data): {items}</p>'


def render(d: ReportData, *, title: str, published: Mapping[str, Any] | None = None,
           meta: MetaResult | None = None, meta_error: str | None = None, seed: int = 0,
           n_boot: int = 1000) -> str:
    """The whole page as a string (all sections, ids stable)."""
    builders: dict[str, Callable[[], str]] = {
        "conditions": lambda: conditions_section(d, seed, n_boot),
        "diagnostics": lambda: diagnostics_section(d),
        "rl-rgd": lambda: rl_rgd_section(d),
        "meta": lambda: meta_section(d, meta, meta_error),
        "published": lambda: published_section(d, published, seed, n_boot),
        "provenance": lambda: provenance_section(d, meta, seed, n_boot),
        **{k.report_id: partial(block, d, seed, n_boot) for k in kinds()
           if k.report_id is not None and (block := k.report_block()) is not None},
    }
    built = {sid: builders[sid]() for sid, _ in SECTIONS}
    shown = [(sid, label) for sid, label in SECTIONS if not _is_empty(built[sid])]
    absent = [(sid, label, _absent_reason(built[sid])) for sid, label in SECTIONS if (sid, label) not in shown]
    sections = [built[sid] for sid, _ in shown] + ([_absent(absent)] if absent else [])
    toc = "".join(f'<a href="#{esc(sid)}">{esc(label)}</a>' for sid, label in shown)
    sub = (f"Personalized reward-model benchmark report · runs folder <code>{esc(d.root.name or str(d.root))}</code> · "
           f"prbench {esc(__version__)}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta name=\"generator\" content=\"prbench {esc(__version__)}\">"
            f"<title>{esc(title)}</title><style>{_css()}</style></head><body>"
            f'<header class="top"><div class="inner"><h1>{esc(title)}</h1><p class="subtitle">{sub}</p>'
            f'<nav class="toc">{toc}</nav></div></header><main>{headline(d)}{_cards(d, meta)}'
            + "".join(sections)
            + f"<footer>Generated by prbench {esc(__version__)}. Self-contained: no external resources.</footer>"
            "</main></body></html>\n")


def build_report(
    runs_dir: str | Path,
    out_html: str | Path,
    *,
    title: str = "prbench report",
    published: Mapping[str, Any] | None = None,
    seed: int = 0,
    n_boot: int = 1000,
    n_perm: int = 1000,
    meta: MetaResult | None = None,
    meta_options: Mapping[str, Any] | None = None,
    data: ReportData | None = None,
) -> Path:
    """Write one self-contained HTML report for everything under `runs_dir`; returns its path.

    The meta-evaluation is computed here (eval runs x downstream results found under
    `runs_dir`, `meta_evaluate` with `seed`, `n_boot`, `n_perm` and `meta_options`) unless a
    precomputed `meta` result is given; `data`: the runs already collected from `runs_dir`.
    `published`: {model_spec: {condition: {category: %}}}.
    """
    d = data if data is not None else collect(runs_dir)
    meta_error = None
    if meta is None and d.evals and d.scan.of("downstream"):
        try:
            opts = {"bon_k": "max", **dict(meta_options or {})}  # the report shows BoN at its largest k
            meta = meta_evaluate([d.root], [d.root], seed=seed, n_boot=n_boot, n_perm=n_perm, scanned=d.scan,
                                 **opts)
        except PrbenchError as exc:
            meta_error = str(exc)
    page = render(d, title=title, published=published, meta=meta, meta_error=meta_error, seed=seed, n_boot=n_boot)
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
