"""What a reward model sees of the user: input conditions, profile retrieval, the aspect planner, a user's judgments.

Modules: `conditions`, `retrieval`, `planner`, `judgments`. Nothing is imported here, so naming one module loads only it."""
