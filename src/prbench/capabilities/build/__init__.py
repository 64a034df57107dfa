"""Benchmark construction (`prbench build`): LaMP-QA-style items -> validated chosen/rejected pairs.

- `kind`: the run kind (`KIND`) and what it names.
- `command`: `prbench build` and its subcommands (export-human, agreement).
- `report`: the report's build section.
- The driver is the shared pipeline package `prbench.build` (`build_benchmark`), and its settings
  (`BuildSettings`) live beside it in `prbench.build.settings`, since the pipeline's `BuildConfig`
  extends them. The reader of report.json (`BuildReport`) is `prbench.runkinds.build`.
"""
