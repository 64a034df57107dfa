"""Run storage: run folders, typed summaries and records, the call cache, manifests, model digests.

Modules: `runs`, `records`, `manifest`, `cache`, `fingerprint`. Nothing is imported here, so naming one module loads only it."""
