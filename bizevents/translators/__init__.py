"""The translators' floor: the plugin API, the registry of plugins, the translation core
(:mod:`~bizevents.translators.pipeline`) and the Faust worker.

Plugin authors import from :mod:`bizevents` (the face), :mod:`bizevents.transactions` and
:mod:`bizevents.testing`, not from here: this package is the runtime's.
"""

# A checkout's root is on sys.path, so `import translators` would load a second copy of the floor.
if __name__ != "bizevents.translators":
    raise ImportError(f"import bizevents.translators, not {__name__}: the floors have one name")
