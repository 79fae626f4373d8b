"""``python -m bizevents ...``, or this file under ``spark-submit``: the command line."""

from bizevents.cli import main

if __name__ == "__main__":
    main(prog_name="bizevents")
