"""The consumer side: what a Python microservice needs to read business topics.

    from bizevents.consumers import Delivery, consume
    from bizevents_store.contracts import OrderPlaced

    def handle(delivery: Delivery[OrderPlaced]) -> None:
        if delivery.supersedes:
            ...  # a corrected version of an event handled before: replace it
        print(delivery.event.total)

    consume(["store.order-placed"], handle, contracts=[OrderPlaced], group_id="billing")

Values are decoded into the contract's pydantic models, the handler is called in
per-key order, offsets are committed after it returns, duplicates are skipped by
``event_id`` within a window, a replayed correction is marked as superseding, and
poison records park their key (or go to a dead-letter topic), to be re-driven in
order through the fixed handler with ``bizevents dlq redrive --consumer GROUP``.
docs/consuming.md has the rest (and how to read the topics from Java and Node). The
public API is exactly ``__all__``.
"""

# A checkout's root is on sys.path, so `import consumers` would load a second copy of the floor.
if __name__ != "bizevents.consumers":
    raise ImportError(f"import bizevents.consumers, not {__name__}: the floors have one name")

from bizevents.consumers.consumer import BusinessConsumer, ConsumerFailedError, consume
from bizevents.consumers.delivery import ConsumerStats, Delivery, Handler
from bizevents.consumers.parking import (
    HEADER_CONSUMER_GROUP,
    HEADER_CONSUMER_OFFSET,
    HEADER_CONSUMER_PARTITION,
    HEADER_CONSUMER_TOPIC,
)
from bizevents.consumers.window import EventWindow, Verdict

__all__ = [
    "HEADER_CONSUMER_GROUP",
    "HEADER_CONSUMER_OFFSET",
    "HEADER_CONSUMER_PARTITION",
    "HEADER_CONSUMER_TOPIC",
    "BusinessConsumer",
    "ConsumerFailedError",
    "ConsumerStats",
    "Delivery",
    "EventWindow",
    "Handler",
    "Verdict",
    "consume",
]
