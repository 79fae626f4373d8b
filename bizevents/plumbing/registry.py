"""Schema-registry plumbing every layer shares: one client factory, one cached
schema-by-id lookup, and the client's failures mapped to ours in one place."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.settings import RegistrySettings

__all__ = ["RegistryUnavailableError", "registry_client", "schema_lookup", "wait_for_registry"]


class RegistryUnavailableError(TransientError):
    """The schema registry could not be reached."""


def registry_client(registry: RegistrySettings | Mapping[str, Any]) -> Any:
    """A confluent-kafka ``SchemaRegistryClient`` for settings or a client configuration."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    conf = registry.client_config() if isinstance(registry, RegistrySettings) else registry
    return SchemaRegistryClient(dict(conf))


def schema_lookup(client: Any) -> Callable[[int], str]:
    """``schema id -> schema text``, cached.

    An id the registry does not know raises ``KeyError`` (the record carrying it is bad,
    not the run); any other failure is a :class:`RegistryUnavailableError` (retry).
    """
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    schemas: dict[int, str] = {}

    def schema_for_id(schema_id: int) -> str:
        found = schemas.get(schema_id)
        if found is None:
            try:
                found = schemas[schema_id] = str(client.get_schema(schema_id).schema_str)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise KeyError(schema_id) from exc
                raise RegistryUnavailableError(
                    f"cannot look up schema id {schema_id}: {exc}"
                ) from exc
            except Exception as exc:  # the client's network errors
                raise RegistryUnavailableError(
                    f"cannot look up schema id {schema_id}: {exc}"
                ) from exc
        return found

    return schema_for_id


def wait_for_registry(
    registry: RegistrySettings,
    wait_s: float,
    on_wait: Callable[[], None] = lambda: None,
    interval_s: float = 0.1,
) -> None:
    """Return once the registry answers; a registry starting beside the caller gets
    ``wait_s`` seconds, asked every ``interval_s`` (the client's own retries back off by
    whole seconds). ``on_wait`` hears the first miss. Any HTTP answer counts: what it
    says is for the caller's requests to judge. Not answering in time raises
    :class:`RegistryUnavailableError`."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = registry_client({**registry.client_config(), "max.retries": 0})
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        try:
            client.get_subjects()
            return
        except SchemaRegistryError:
            return
        except Exception as exc:  # the client's network errors (httpx or httpx2)
            if time.monotonic() >= deadline:
                raise RegistryUnavailableError(
                    f"the schema registry at {registry.url} did not answer within {wait_s:g} s: "
                    f"{exc}"
                ) from exc
            if not waited:
                waited = True
                on_wait()
            time.sleep(interval_s)
