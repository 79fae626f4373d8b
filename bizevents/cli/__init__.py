"""The ``bizevents`` command line: ``main`` (the console script's entry point) and one
module per group of subcommands, each parsing its arguments, calling the floor below
and printing what it returns."""

from bizevents.cli.root import main

__all__ = ["main"]
