"""What a reward model sees of the user: input conditions, profile retrieval, a user's judgments.

Modules: `conditions`, `retrieval`, `judgments` (the aspect planner that writes the `planner` condition's plans is
the plan capability's, `prbench.capabilities.plan`). Nothing is imported here, so naming one module loads only it.
"""
