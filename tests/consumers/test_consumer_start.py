"""The consumer kit's start-up while the cluster is away: it waits (``broker_wait_s``)
instead of exiting, and gives up with a :class:`TransientError` past the wait. The
dead-letter topic check, which needs the cluster, is replaced by a fake here; the
wait around it is the code under test."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import pytest
from bizevents_store.contracts import OrderPlaced

from bizevents.consumers import BusinessConsumer
from bizevents.plumbing.errors import ConfigError, TransientError
from bizevents.plumbing.settings import KafkaSettings


def _consumer(wait_s: float) -> BusinessConsumer:
    return BusinessConsumer(
        ["store.order-placed"],
        lambda delivery: None,
        contracts=[OrderPlaced],
        group_id="start-test",
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"),
        registry=object(),  # a client is never called before the first record
        broker_wait_s=wait_s,
    )


def test_start_waits_for_a_cluster_that_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _consumer(wait_s=30)
    attempts: list[int] = []

    def away_twice() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientError("cannot reach the Kafka cluster to prepare topics")

    monkeypatch.setattr(consumer, "_ensure_dead_letter_topic", away_twice)
    asyncio.run(consumer._wait_for_broker())
    assert len(attempts) == 3


def test_start_gives_up_past_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _consumer(wait_s=0)

    def away() -> None:
        raise TransientError("cannot reach the Kafka cluster to prepare topics")

    monkeypatch.setattr(consumer, "_ensure_dead_letter_topic", away)
    with pytest.raises(TransientError, match="cannot reach the Kafka cluster"):
        asyncio.run(consumer._wait_for_broker())


def test_metrics_are_served_while_it_runs_and_a_taken_port_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``metrics_port``: the endpoint answers from the start of ``run()`` (here: while
    it waits for the cluster) and is closed when ``run()`` returns."""
    consumer = _consumer(wait_s=0)
    consumer.metrics_port = 0
    scraped: list[str] = []

    def away() -> None:
        assert consumer.metrics_url is not None
        with urllib.request.urlopen(consumer.metrics_url, timeout=5) as response:
            scraped.append(response.read().decode())
        raise TransientError("cannot reach the Kafka cluster to prepare topics")

    monkeypatch.setattr(consumer, "_ensure_dead_letter_topic", away)
    with pytest.raises(TransientError):
        asyncio.run(consumer.run())
    assert 'bizevents_consumer_parked_keys{group="start-test"} 0.0' in scraped[0]
    assert 'bizevents_consumer_delivered_total{group="start-test"} 0.0' in scraped[0]
    assert consumer.metrics_url is None

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = _consumer(wait_s=0)
        busy.metrics_port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"cannot serve its metrics on 127\.0\.0\.1:") as err:
            asyncio.run(busy.run())
    assert "\n" not in str(err.value)
