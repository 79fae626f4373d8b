"""The demo (``bizevents demo``): the whole flow on the embedded stack, live on the
terminal. :mod:`~bizevents.demo.run` runs the story; :mod:`~bizevents.demo.plan` holds
its names and knobs, :mod:`~bizevents.demo.store` the store's database and plugin,
:mod:`~bizevents.demo.processes` capture and the workers, :mod:`~bizevents.demo.view`
what the terminal shows."""

from bizevents.demo.plan import PINS, StoryPlan
from bizevents.demo.run import replayed, run_demo
from bizevents.demo.store import store_plugin

__all__ = ["PINS", "StoryPlan", "replayed", "run_demo", "store_plugin"]
