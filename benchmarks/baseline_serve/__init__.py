"""Today's reward server, kept as the baseline of benchmarks/serve.py: `prbench.downstream.server`
and its modules as they were on main at efb137a (before `prbench.serve`), imports made local."""
