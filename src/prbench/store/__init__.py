"""Run storage: run folders, typed summaries and records, the call cache.

Modules: `runs`, `records`, `cache`. Nothing is imported here, so naming one module loads only it.
"""
