"""``python -m replay ...`` or ``spark-submit replay/__main__.py ...``: the replay command.

The arguments are those of ``bizevents replay``; settings come from the environment
(``BIZEVENTS_*``) or ``BIZEVENTS_CONFIG``, as for every bizevents command.
"""

from __future__ import annotations


def main() -> None:
    from bizevents.replaycli import replay

    replay(prog_name="replay")


if __name__ == "__main__":
    main()
