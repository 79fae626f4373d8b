"""What a worker reads and writes: technical topics of the pinned translators, their
contracts checked against a fake registry at start-up, a broker waited for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bizevents import translator
from bizevents.plumbing.errors import ConfigError
from bizevents.translators.exceptions import PluginError
from bizevents.translators.settings import TranslateSettings
from bizevents.translators.topology import check_contracts, readers, technical_topics
from tests.translators.sample import ThingCreated, things_v1, things_v2


@translator(name="all-things", version=1, sources=["inventory.thing_*"], emits=[ThingCreated])
def all_things(change: Any) -> None:
    return None


# -- topics and partitions -------------------------------------------------------------


def test_topics_are_prefix_schema_table() -> None:
    """Each source ``schema.table`` becomes ``<prefix>.<schema>.<table>``, once."""
    settings = TranslateSettings(topic_prefix="shop")
    assert technical_topics([things_v1, things_v2], settings) == ["shop.public.things"]


def test_wildcard_sources_match_existing_topics() -> None:
    """A wildcard source subscribes the matching topics that exist at start-up."""
    existing = ["shop.inventory.thing_a", "shop.inventory.thing_b", "other.inventory.thing_c"]
    topics = technical_topics([all_things], TranslateSettings(topic_prefix="shop"), existing)
    assert topics == ["shop.inventory.thing_a", "shop.inventory.thing_b"]
    assert readers([all_things, things_v1], topics)["shop.inventory.thing_a"] == ("all-things@1",)


def test_wildcard_without_a_topic_names_the_translator() -> None:
    with pytest.raises(ConfigError, match=r"translator all-things@1 reads 'inventory.thing_\*'"):
        technical_topics([all_things], TranslateSettings(topic_prefix="shop"), ["shop.x.y"])


def test_explicit_topics_win_and_a_prefix_is_needed_otherwise() -> None:
    explicit = TranslateSettings(topics=("b.public.things", "a.public.things"))
    assert technical_topics([things_v1], explicit) == ["a.public.things", "b.public.things"]
    with pytest.raises(ConfigError, match=r"translate\.topic_prefix"):
        technical_topics([things_v1], TranslateSettings())


# -- contracts at start-up ----------------------------------------------------------------


@dataclass
class FakeRegistry:
    refuse: int | None = None
    registered: dict[str, str] = field(default_factory=dict)

    def register_schema(self, subject: str, schema: Any) -> int:
        if self.refuse is not None:
            raise SchemaRegistryError(self.refuse, 409, "READER_FIELD_MISSING_DEFAULT_VALUE")
        self.registered[subject] = schema.schema_str
        return len(self.registered)

    def lookup_schema(self, subject: str, schema: Any) -> Any:
        raise SchemaRegistryError(404, 40403, "Schema not found")


def _subject(contract: Any) -> str:
    return f"{contract.contract_topic()}-value"


def test_contracts_are_registered_under_their_subjects() -> None:
    registry = FakeRegistry()
    ids = check_contracts([things_v1], registry, _subject, auto_register=True)
    assert set(ids) == {"test.thing-created-value", "test.thing-renamed-value"}


def test_an_incompatible_contract_fails_start_up_naming_the_plugin() -> None:
    with pytest.raises(PluginError) as caught:
        check_contracts([things_v1], FakeRegistry(refuse=409), _subject, auto_register=True)
    message = str(caught.value)
    assert "translator things@1" in message
    assert "tests.translators.sample.things_v1" in message  # the plugin
    assert "test.things.ThingCreated" in message and "incompatible" in message


def test_a_missing_contract_fails_start_up_without_auto_registration() -> None:
    with pytest.raises(PluginError, match=r"is not registered under test\.thing-created-value"):
        check_contracts([things_v1], FakeRegistry(), _subject, auto_register=False)


def test_start_up_waits_for_a_broker_then_says_which() -> None:
    """A broker that does not answer is waited for (a restart during an outage rides it
    out), then named in one sentence; a broker that answers meanwhile would end the wait."""
    import socket
    import time as clock

    from confluent_kafka.admin import AdminClient

    from bizevents.plumbing.errors import TransientError
    from bizevents.translators.topology import list_topics

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    started = clock.monotonic()
    with pytest.raises(TransientError, match=f"cannot list the topics of {bootstrap}"):
        list_topics(admin, bootstrap, 3.0)
    assert clock.monotonic() - started >= 3.0
