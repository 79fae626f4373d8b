"""The embedded development stack: broker, schema registry and PostgreSQL on loopback."""

from bizevents.devstack.processes import StackError
from bizevents.devstack.stack import DevStack, Endpoints, Health

__all__ = ["DevStack", "Endpoints", "Health", "StackError"]
