"""A replay's checks before any task runs, for both replays (rows and transactions): the
registry answers, every contract the output needs is registered (or found), the output
topics exist, pyspark is there for a Parquet output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bizevents.plumbing.kafka import ensure_topics
from bizevents.plumbing.registry import registry_client
from bizevents.replay.exceptions import (
    RegistryUnreachableError,
    ReplayConfigError,
)
from bizevents.translators.api import Translator

__all__ = [
    "check_contracts",
    "check_parquet",
    "check_registry",
    "ensure_output_topics",
]


def check_registry(conf: dict[str, Any], url: str) -> Any:
    client = registry_client(conf)
    try:
        client.get_subjects()
    except Exception as exc:
        raise RegistryUnreachableError(
            f"the schema registry at {url} cannot be reached ({type(exc).__name__}: {exc}); "
            "the replay needs it to decode technical records"
        ) from exc
    return client


def check_contracts(
    client: Any, translators: Sequence[Translator], strategy: str, auto_register: bool
) -> None:
    """Register (or find) every contract the output needs before a task runs."""
    from confluent_kafka.schema_registry import Schema

    from bizevents.contracts.subjects import subject_strategy

    name_of = subject_strategy(strategy)
    for item in translators:
        for contract in item.emits:
            subject = name_of(contract.contract_topic(), contract.contract_fullname())
            schema = Schema(contract.contract_schema_text(), "AVRO")
            try:
                if auto_register:
                    client.register_schema(subject, schema)
                else:
                    client.lookup_schema(subject, schema)
            except Exception as exc:
                raise ReplayConfigError(
                    f"contract {contract.contract_fullname()} of {item.ref} cannot be used "
                    f"under subject {subject}: {exc}"
                ) from exc


def ensure_output_topics(
    kafka: dict[str, Any], topics: Sequence[str], partitions: int, wait_s: float
) -> dict[str, int]:
    """Create the missing output topics; ``topic -> partition count`` of each. A cluster
    restarting is waited for, ``wait_s`` at most."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka, "log.connection.close": False})
    return ensure_topics(admin, topics, partitions, wait_s=wait_s)


def check_parquet() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ReplayConfigError(
            "--format parquet is written by Spark: install bizevents[spark]"
        ) from None
