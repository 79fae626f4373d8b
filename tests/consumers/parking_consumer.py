"""A consumer-kit process for the parking tests (tests/consumers/test_consumer_parking.py).

``python -m tests.consumers.parking_consumer BOOTSTRAP REGISTRY TOPIC GROUP LOG [--fixed]
[--slow-keys K,K]``: consumes ``TOPIC`` as a member of ``GROUP``; its handler appends
``pid sku seq event_id`` to ``LOG`` for every event it handled (one ``write`` per line,
so processes that share the file never mix lines), raises on a poisoned event unless
``--fixed`` (the planted failure and its fix), and takes 30 ms per event of the
``--slow-keys`` (a slowed re-drive, to be killed in the middle of). Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import time
from decimal import Decimal
from typing import Any

from bizevents.consumers import Delivery, consume
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings

POISON = Decimal("13.13")


def main() -> None:
    from tests.consumers.test_consumer import PriceSet

    args = argparse.ArgumentParser()
    for name in ("bootstrap", "registry", "topic", "group", "log"):
        args.add_argument(name)
    args.add_argument("--fixed", action="store_true")
    args.add_argument("--slow-keys", default="")
    opts = args.parse_args()
    slow = set(filter(None, opts.slow_keys.split(",")))
    log = os.open(opts.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    pid = os.getpid()

    def handle(delivery: Delivery[Any]) -> None:
        event = delivery.event
        if event.price == POISON and not opts.fixed:
            raise ValueError(f"{event.sku} has a poisoned price")
        if event.sku in slow:
            time.sleep(0.03)
        os.write(log, f"{pid} {event.sku} {event.seq} {delivery.event_id}\n".encode())

    consume(
        [opts.topic],
        handle,
        contracts=[PriceSet],
        group_id=opts.group,
        kafka=KafkaSettings(bootstrap_servers=opts.bootstrap),
        registry=RegistrySettings(url=opts.registry),
        retry_backoff_s=0.01,
    )


if __name__ == "__main__":
    main()
