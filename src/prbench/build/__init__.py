"""Benchmark construction: LaMP-QA-style items -> validated chosen/rejected pairs.

Modules, one job each: `generate` (answers within the word limit), `validate` (four 1-5
scales, robust parsing), `filter` (the keep rule), `export` (parquet/JSONL per category, card,
hub push), `report` (the validation table), `annotate` (human validation round trip),
`calls` (cached model calls), `settings` (what a build is asked: `BuildSettings`) and `pipeline`
(the resumable driver).
"""

from prbench.build.filter import FilterRule
from prbench.build.pipeline import BuildConfig, BuildResult, build_benchmark

__all__ = ["BuildConfig", "BuildResult", "FilterRule", "build_benchmark"]
