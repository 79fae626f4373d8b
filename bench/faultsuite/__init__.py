"""The fault suite's parts; ``bench/faults.py`` runs it (docs/reliability.md)."""
