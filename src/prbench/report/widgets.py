"""HTML building blocks of the report: escaped cells, tables, inline figures, number formats."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prbench.leaderboard import is_control_run, is_control_spec  # noqa: F401  (re-exported)
from prbench.report import plots
from prbench.schema import CATEGORY_SHORT

CONDITION_HELP = {
    "none": "question only",
    "profile": "question + retrieved profile posts",
    "planner": "question + planner-written expected aspects",
    "oracle": "question + the true rubric aspects (upper bound)",
    "wrong-profile": "question + another user's posts (control)",
}
OVERALL_KEYS = {"all", "overall", "micro", "mean", "avg", "average"}


def esc(value: Any) -> str:
    """Escape text from data for HTML bodies and attributes (quotes included)."""
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class Cell:
    """A table cell: already-escaped HTML plus CSS classes and an optional tooltip."""

    html: str
    cls: str = ""
    title: str = ""
    rowspan: int = 1

    def render(self, tag: str = "td") -> str:
        attrs = (f' class="{esc(self.cls)}"' if self.cls else "") + (f' title="{esc(self.title)}"' if self.title else "")
        if self.rowspan > 1:
            attrs += f' rowspan="{int(self.rowspan)}"'
        return f"<{tag}{attrs}>{self.html}</{tag}>"


def text(value: Any, cls: str = "", title: str = "") -> Cell:
    return Cell(esc(value), cls, title)


def numc(value: str, title: str = "", extra: str = "") -> Cell:
    return Cell(value, ("num " + extra).strip(), title)


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]], *, row_classes: Sequence[str] | None = None,
          caption: str = "", cls: str = "") -> str:
    """An HTML table; plain strings are escaped, Cells are trusted HTML built with `esc`."""
    def cell(c: Cell | str, tag: str) -> str:
        return (c if isinstance(c, Cell) else text(c)).render(tag)

    out = [f'<div class="scroll"><table class="{esc(cls)}">' if cls else '<div class="scroll"><table>']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(cell(h, "th") for h in head) + "</tr></thead><tbody>")
    for i, r in enumerate(rows):
        cls = row_classes[i] if row_classes and i < len(row_classes) else ""
        out.append((f'<tr class="{esc(cls)}">' if cls else "<tr>") + "".join(cell(c, "td") for c in r) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def figure(png: bytes | None, alt: str, caption: str = "") -> str:
    """An <img> with the PNG inline as a data URI (or a note when matplotlib is missing)."""
    if png is None:
        return ('<p class="empty">Plot not drawn: matplotlib is not installed '
                "(<code>pip install prbench[report]</code>); the table holds the same numbers.</p>"
                if not plots.available() else "")
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def empty(message: str) -> str:
    return f'<p class="empty">{esc(message)}</p>'


def pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{100 * v:.{digits}f}"


def acc_cell(v: float | None, lo: float | None, hi: float | None, *, title: str = "", best: bool = False,
             inline: bool = False) -> Cell:
    """Accuracy % with its CI under it (or beside it), right aligned."""
    if v is None:
        return numc("–", title)
    ci = ""
    if lo is not None and hi is not None:
        ci = (f'<span class="inline-ci">[{pct(lo)}, {pct(hi)}]</span>' if inline
              else f'<span class="ci">[{pct(lo)}, {pct(hi)}]</span>')
    return numc(f"{pct(v)}{ci}", title, "best" if best else "")


def fnum(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    try:
        return f"{float(v):.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def signed_pp(v: float | None) -> str:
    """A difference in percentage points, coloured by sign."""
    if v is None:
        return "–"
    cls = "pos" if v > 0 else ("neg" if v < 0 else "")
    return f'<span class="{cls}">{100 * v:+.1f}</span>'


is_baseline = is_control_run  # a control row (the leaderboard's rule: one for both readers)


def model_cell(name: str, baseline: bool = False, reference: str = "", rowspan: int = 1) -> Cell:
    badge = '<span class="badge baseline">baseline</span>' if baseline else ""
    if reference:
        badge += f'<span class="badge ref">{esc(reference)}</span>'
    return Cell(esc(name) + badge, "model", rowspan=rowspan)


def cat_label(cat: str) -> str:
    return CATEGORY_SHORT.get(cat, cat)


def rel(path: Any, root: Path) -> str:
    """A path relative to the runs folder when it lies inside, else as given."""
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(path)


def section(sid: str, title: str, explain: str, body: str) -> str:
    return (f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>'
            f'<p class="explain">{explain}</p>{body}</section>')
