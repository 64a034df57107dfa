"""Built-in capabilities, each one package holding every part of one run kind, registered the way a plug-in is
(one line in `prbench.registry.RUNKINDS`).

- bon: Best-of-N curves of RMs on a policy's samples (`prbench bon`, the study's `bon` stage)

Each package holds the files that apply: `settings.py` (the driver's settings and the study section),
`driver.py` (writes one run), `kind.py` (the `RunKind`, naming every other part), `stage.py` (the study stage),
`command.py` (the `prbench` command) and `report.py` (its report block). docs/extending.md shows how to add one.
"""
