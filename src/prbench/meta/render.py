"""Meta-evaluation output: the paper-shaped Markdown table, one CSV line per row, meta.json."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prbench.meta.result import CrossBenchmark, MetaResult, MetaRow
from prbench.meta.stats import CROSS_METRICS
from prbench.stats import metrics
from prbench.store.records import RankValue
from prbench.store.runs import write_json_atomic

# The paper's table columns (their order), then Kendall tau-b.
PAPER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ndcg", "NDCG"), ("weighted_tau", "weighted tau"), ("spearman", "Spearman"), ("rbo", "RBO"),
    ("kendall_tau_b", "Kendall"),
)


def fmt_ci(m: Mapping[str, Any] | RankValue | None, digits: int = 3) -> str:
    """'value [lo, hi]' (or '-' when undefined), the cell format of the paper-style table."""
    r = m if isinstance(m, RankValue) else RankValue.model_validate(m or {})
    if r.value is None:
        return "-"
    v = f"{r.value:.{digits}f}"
    if r.ci_low is None or r.ci_high is None:
        return v
    return f"{v} [{r.ci_low:.{digits}f}, {r.ci_high:.{digits}f}]"


def main_rows(result: MetaResult) -> list[MetaRow]:
    """Rows of the headline table: BoN only at its largest k, every other setting as is."""
    return result.main_rows()


def _md_table(rows: Sequence[MetaRow]) -> list[str]:
    head = ["benchmark", "setting", "RMs", *[label for _, label in PAPER_COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|" + "---:|" * len(PAPER_COLUMNS)]
    for r in rows:
        cells = [r.benchmark.label, r.setting.label, str(r.n_rms)]
        if r.metrics is None:
            cells += ["-"] * len(PAPER_COLUMNS)
        else:
            cells += [fmt_ci(r.metrics[name]) for name, _ in PAPER_COLUMNS]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def meta_markdown(result: MetaResult) -> str:
    """The paper-shaped table (value [95% CI]), per-k BoN, paper B's number, summary comparison, notes."""
    prm = result.parameters
    out = [f"# Meta-evaluation (benchmark summary: {prm.summary_stat})", "",
           (f"Rank agreement over RMs between benchmark and downstream scores. Cells: value [{int(prm.ci * 100)}% "
            f"CI], item bootstrap with {prm.n_boot} resamples (joint when both sides share items, else "
            f"independent); RBO p={prm.p}, NDCG {'@' + str(prm.k) if prm.k else 'over all RMs'}, "
            f"seed {prm.seed}."), ""]
    rows = main_rows(result)
    out += _md_table(rows) if rows else ["(no benchmark x downstream pairs)"]
    bon_k = [r for r in result.rows if r.setting.setting == "bon" and not r.setting.max_k]
    if bon_k:
        out += ["", "## Best-of-N at every k", ""] + _md_table([r for r in result.rows
                                                               if r.setting.setting == "bon"])
    out += ["", "## Permutation p-values (one-sided, agreement better than chance)", "",
            "| benchmark | setting | " + " | ".join(label for _, label in PAPER_COLUMNS) + " |",
            "|---|---|" + "---:|" * len(PAPER_COLUMNS)]
    for r in rows:
        ps = ["-" if (pv := r.metric(n).p_value) is None else f"{pv:.3f}" for n, _ in PAPER_COLUMNS]
        out.append(f"| {r.benchmark.label} | {r.setting.label} | " + " | ".join(ps) + " |")
    if result.paper_b:
        out += ["", "## RM accuracy vs policy accuracy (paper B: Kendall tau 0.08-0.31)", "",
                "| RM accuracy from | setting | RMs | Kendall tau-b |", "|---|---|---:|---:|"]
        for e in result.paper_b:
            tau = e.kendall_tau_b
            cell = (fmt_ci(tau) if tau and tau.value is not None else
                    e.note or ("undefined (constant scores)" if tau else "-"))
            out.append(f"| {e.benchmark} | {e.setting} | {e.n_rms} | {cell} |")
    if result.cross_benchmark:
        out += ["", "## Which benchmark ranks the RMs most like each downstream setting", "",
                "Cells: value [CI] (permutation p). Best per metric in bold; 'best overall' is best on most metrics.",
                ""]
        out += cross_benchmark_markdown(result.cross_benchmark)
    comp = result.summary_comparison
    out += ["", "## Which benchmark summary predicts downstream best", "",
            "| summary | mean Spearman | mean Kendall | common rows | rows with a value | best in rows |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, v in comp.overall.items():
        sp = "-" if v.mean_spearman is None else f"{v.mean_spearman:.3f}"
        kt = "-" if v.mean_kendall_tau_b is None else f"{v.mean_kendall_tau_b:.3f}"
        out.append(f"| {name} | {sp} | {kt} | {v.n_rows} | {v.n_rows_available} | {v.best_in_rows} |")
    out += ["", f"Best: {comp.best or '-'} ({comp.rule})."]
    notes = [r for r in result.rows if r.note]
    if notes or result.notes:
        out += ["", "## Notes", ""]
        out += [f"- {r.benchmark.label} x {r.setting.label}: {r.note}" for r in notes]
        out += [f"- {n}" for n in result.notes]
    out += ["", "## Definitions", ""] + [f"- **{k}**: {v}" for k, v in result.definitions.items()]
    return "\n".join(out) + "\n"


CROSS_LABELS = {"ndcg": "NDCG", "weighted_tau": "weighted tau", "spearman": "Spearman", "rbo": "RBO"}


def cross_benchmark_markdown(entries: Sequence[CrossBenchmark]) -> list[str]:
    """The cross-benchmark table: one block per downstream setting, one line per benchmark."""
    lines: list[str] = []
    for c in entries:
        lines += [f"### {c.setting}: best overall {c.best_overall or '-'}"
                  + ("" if c.same_rms else " (benchmarks compared over different RM sets)"), "",
                  "| benchmark | RMs | " + " | ".join(CROSS_LABELS[m] for m in CROSS_METRICS) + " |",
                  "|---|---:|" + "---:|" * len(CROSS_METRICS)]
        for e in c.benchmarks:
            cells = []
            for m in CROSS_METRICS:
                v = e.metric(m)
                cell = fmt_ci(v) + (f" (p {v.p_value:.3f})" if v.p_value is not None else "")
                cells.append(f"**{cell}**" if c.best[m] == e.benchmark else cell)
            if e.metrics is None:
                cells = [e.note or "-"] + [""] * (len(CROSS_METRICS) - 1)
            lines.append(f"| {e.benchmark} | {e.n_rms} | " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        lines.append("")
    return lines


def write_csv(result: MetaResult, path: Path) -> Path:
    """One line per benchmark x setting x summary... x metric columns (value, ci_low, ci_high, p_value)."""
    head = ["benchmark_data", "benchmark_condition", "summary", "setting_label", "setting", "k", "max_k",
            "setting_condition", "n_rms", "rms", "n_items_benchmark", "n_items_downstream", "n_items_shared",
            "resampling", "best_summary"]
    for name in metrics.RANK_METRICS:
        head += [name, f"{name}_ci_low", f"{name}_ci_high", f"{name}_p_value"]
    head.append("note")
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in result.rows:
            line: list[Any] = [r.benchmark.data, r.benchmark.condition, r.benchmark.summary_stat,
                    r.setting.label, r.setting.setting, r.setting.k, r.setting.max_k,
                    r.setting.condition, r.n_rms, ";".join(r.rms), r.n_items_benchmark,
                    r.n_items_downstream, r.n_items_shared, r.resampling, r.best_summary]
            for name in metrics.RANK_METRICS:
                m = r.metric(name)
                line += [m.value, m.ci_low, m.ci_high, m.p_value]
            line.append(r.note)
            w.writerow(line)
    return path


def write_meta(result: MetaResult, out_dir: str | Path) -> dict[str, Path]:
    """meta.json (everything), meta.csv (one line per row) and meta.md (the paper-shaped table)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "meta.json", result.model_dump())
    write_csv(result, out / "meta.csv")
    (out / "meta.md").write_text(meta_markdown(result), encoding="utf-8")
    return {"json": out / "meta.json", "csv": out / "meta.csv", "md": out / "meta.md"}
