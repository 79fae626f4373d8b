"""bizevents package."""
