"""The HTML report: one self-contained file over a runs folder (see `report.html`)."""

from __future__ import annotations

from prbench.report.html import SECTIONS, build_report, collect, render

__all__ = ["SECTIONS", "build_report", "collect", "render"]
