"""The registry plumbing: the cached schema lookup with a fake client, and the wait for a
registry that does not answer."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bizevents.plumbing.registry import RegistryUnavailableError, schema_lookup, wait_for_registry
from bizevents.plumbing.settings import RegistrySettings


class _Registry:
    def __init__(self, failure: Exception | None = None) -> None:
        self.calls = 0
        self.failure = failure

    def get_schema(self, schema_id: int) -> Any:
        self.calls += 1
        if self.failure is not None:
            raise self.failure

        class _Schema:
            schema_str = f'"schema {schema_id}"'

        return _Schema()


def test_schema_lookup_caches() -> None:
    client = _Registry()
    lookup = schema_lookup(client)
    assert lookup(5) == lookup(5) == '"schema 5"'
    assert client.calls == 1


def test_an_unknown_id_is_a_bad_record_not_an_outage() -> None:
    lookup = schema_lookup(_Registry(SchemaRegistryError(404, 40403, "Schema not found")))
    with pytest.raises(KeyError):
        lookup(9)


@pytest.mark.parametrize(
    "failure", [SchemaRegistryError(500, 50001, "boom"), ConnectionError("refused")]
)
def test_other_failures_are_the_registry_unavailable(failure: Exception) -> None:
    with pytest.raises(RegistryUnavailableError, match="schema id 9"):
        schema_lookup(_Registry(failure))(9)


def test_a_registry_that_does_not_answer_is_waited_for_then_named(closed_address: str) -> None:
    """Asked every interval until the wait is over; the first miss is heard once."""
    misses: list[int] = []
    registry = RegistrySettings(url=f"http://{closed_address}")
    with pytest.raises(RegistryUnavailableError, match=rf"at http://{closed_address} did not"):
        wait_for_registry(registry, 0.3, lambda: misses.append(1), interval_s=0.05)
    assert misses == [1]
