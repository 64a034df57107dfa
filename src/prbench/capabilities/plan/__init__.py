"""The plan capability: the aspect planner and the runs it writes."""
