"""``python -m bizevents`` runs the command line."""

from bizevents.cli import main

main()
