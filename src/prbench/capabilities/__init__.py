"""The built-in run kinds, each one package in the shape a plug-in has (docs/extending.md).

eval, build, bon, rl, rgd, policy_accuracy, icl, sample, plan. A package's `kind.py` holds its
`RunKind` and `KIND` (what `prbench.registry.RUNKINDS` lists) and names by direct reference its
settings, driver, study stage, command and report block; its `__init__` says where each part is.
Nothing is imported here.
"""
