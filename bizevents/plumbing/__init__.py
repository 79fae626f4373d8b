"""The ground floor: errors, settings groups, logging, metrics serving, Kafka and registry
plumbing. It imports nothing of bizevents' own; every other package builds on it."""

# A checkout's root is on sys.path, so `import plumbing` would load a second copy of the floor.
if __name__ != "bizevents.plumbing":
    raise ImportError(f"import bizevents.plumbing, not {__name__}: the floors have one name")
