"""What the commands ask of capture outside its run: a signal written to a running
capture's signal topic, and a source position written as the source writes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bizevents.capture.config import CaptureConfig
from bizevents.capture.core.signals import Signal, SignalTopic
from bizevents.capture.exceptions import CaptureError
from bizevents.plumbing.kafka import DeliveryError, ensure_topics, send_confirmed

__all__ = ["position_writer", "send_signals"]


def send_signals(kafka: dict[str, Any], config: CaptureConfig, signals: Sequence[Signal]) -> str:
    """Write ``signals`` to the capture's signal topic (made when missing) and return
    its name once the broker acknowledged them; the running capture carries them out
    between two transactions of its stream."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    topic = SignalTopic(kafka, config.signal_topic_name, config.server).topic
    ensure_topics(AdminClient(kafka), [topic], 1, timeout_s=15)
    try:
        records = [(*SignalTopic.record(s), -1) for s in signals]
        send_confirmed(Producer(kafka), topic, records)
    except DeliveryError as exc:
        raise CaptureError(f"Kafka did not take the signal on {topic}: {exc.reason}") from None
    return topic


def position_writer(config: CaptureConfig) -> Callable[[int], str]:
    """How the capture's source writes a position: a binlog place, or an LSN."""
    from bizevents.capture.mariadb.quarantine import describe_position
    from bizevents.capture.postgres.messages import format_lsn
    from bizevents.capture.verifytables import is_mysql

    dsn = config.dsn.get_secret_value() if config.dsn is not None else ""
    return describe_position if is_mysql(dsn) else format_lsn
