"""How a process runs: progress, clean interrupts, launcher ranks, optional imports, hub checks.

Modules: `progress`, `interrupt`, `ranks`, `extras`, `hub`. Nothing is imported here, so naming one module loads only it."""
