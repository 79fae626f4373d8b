"""The ground floor: errors, settings groups, logging, metrics serving, Kafka and registry
plumbing. It imports nothing of bizevents' own; every other package builds on it."""
