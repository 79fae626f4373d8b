"""What the demo shows: the business topics read, decoded and tallied, drawn on the terminal."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter, deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from bizevents.demo.plan import DEAD_LETTER_TOPIC
from bizevents.plumbing.framing import unframe
from bizevents.story import Agreement, OrderBook, Seen, describe


@dataclass
class Tally:
    """What the terminal shows; written by the reader thread, read by the display."""

    per_topic: Counter[str] = field(default_factory=Counter)
    #: (translator@version, the event in words), the latest last
    recent: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=10))
    #: counters of the running worker, and the sums of the workers stopped before it
    translator_counts: dict[str, dict[str, float]] = field(default_factory=dict)
    earlier_counts: dict[str, dict[str, float]] = field(default_factory=dict)
    #: business events seen per translator@version (from their lineage), live only
    per_translator: Counter[str] = field(default_factory=Counter)
    #: OrderPlaced events seen live, and those whose total is not 0.00
    orders_placed: int = 0
    orders_with_total: int = 0
    load_steps: int = 0
    book: OrderBook = field(default_factory=OrderBook)
    #: order id → status in PostgreSQL, for this run's orders
    database: dict[int, str] = field(default_factory=dict)
    #: order id → total in PostgreSQL, for this run's orders
    totals: dict[int, Decimal] = field(default_factory=dict)
    history: list[float] = field(default_factory=list)
    step: str = ""
    #: held by the load for each store action: whoever holds it pauses the store
    pause: threading.Lock = field(default_factory=threading.Lock)
    first_event_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def counts(self) -> dict[str, dict[str, float]]:
        """Per translator@version, this run's counters over every worker it started."""
        merged: dict[str, dict[str, float]] = {}
        for source in (self.earlier_counts, self.translator_counts):
            for ref, values in source.items():
                into = merged.setdefault(ref, {})
                for key, value in values.items():
                    into[key] = into.get(key, 0.0) + value
        return merged

    def retire_worker(self) -> None:
        """The running worker stops: keep its last counters in the sums."""
        self.earlier_counts = self.counts()
        self.translator_counts = {}


class _Decoder:
    """Business events in the Confluent framing, decoded with their writer's schema
    (fetched from the registry by id, once)."""

    def __init__(self, registry_url: str) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.schemas: dict[int, tuple[str, Any]] = {}

    def __call__(self, data: bytes) -> tuple[str, dict[str, Any]]:
        import io

        import fastavro

        schema_id, body = unframe(data)
        if schema_id not in self.schemas:
            url = f"{self.registry_url}/schemas/ids/{schema_id}"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = json.load(response)["schema"]
            parsed: Any = fastavro.parse_schema(json.loads(text))
            self.schemas[schema_id] = (str(json.loads(text)["name"]).rpartition(".")[2], parsed)
        name, schema = self.schemas[schema_id]
        record = fastavro.schemaless_reader(io.BytesIO(body), schema, None)
        assert isinstance(record, dict)
        return name, record


def _read_business_topics(
    bootstrap: str,
    registry_url: str,
    topics: list[str],
    since_ms: int,
    stop: threading.Event,
    tally: Tally,
) -> None:
    """Follow the business topics in assign mode (no consumer group needed to watch),
    from their start, counting what was produced since ``since_ms``: this run's events,
    even on a stack that earlier runs used (the broker's ListOffsets cannot be trusted
    for the ends, see docs/broker.md)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bizevents-demo-view",
            "log_level": 0,
            "enable.auto.commit": False,
            "log.connection.close": False,
            "fetch.wait.max.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    decode = _Decoder(registry_url)
    assigned: set[tuple[str, int]] = set()
    last_refresh = 0.0
    try:
        while not stop.is_set():
            if time.monotonic() - last_refresh > 1:
                last_refresh = time.monotonic()
                metadata = consumer.list_topics(timeout=5)
                new = {
                    (t, p)
                    for t in topics
                    if t in metadata.topics
                    for p in metadata.topics[t].partitions
                } - assigned
                if new:
                    assigned |= new
                    consumer.incremental_assign([TopicPartition(t, p, 0) for t, p in sorted(new)])
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is not None or message.timestamp()[1] < since_ms:
                    continue
                _show(message, decode, tally)
    finally:
        consumer.close()


def _show(message: Any, decode: _Decoder, tally: Tally) -> None:
    topic = str(message.topic())
    if topic == DEAD_LETTER_TOPIC:
        headers = {str(k): _text(v) for k, v in list(message.headers() or [])}
        line = ("dead letter", headers.get("bizevents.dlq.reason", "")[:80])
        with tally.lock:
            tally.per_topic[topic] += 1
            tally.recent.append(line)
        return
    try:
        seen = Seen.from_record(*decode(message.value()))
    except Exception as exc:  # a view: an event it cannot read is shown, never fatal
        with tally.lock:
            tally.recent.append(("?", f"{topic}: not readable ({exc})"[:100]))
        return
    label = seen.translator + (" (replay)" if seen.replay else "")
    with tally.lock:
        if not seen.replay:
            tally.per_topic[topic] += 1
            tally.per_translator[seen.translator] += 1
            if seen.contract == "OrderPlaced":
                tally.orders_placed += 1
                tally.orders_with_total += seen.fields.get("total") != 0
        if tally.first_event_at is None:
            tally.first_event_at = time.monotonic()
        tally.book.add(seen)
        tally.recent.append((label, describe(seen)))


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _scrape(url: str) -> dict[str, dict[str, float]]:
    """Per-translator counters from the worker's Prometheus text endpoint."""
    counts: dict[str, dict[str, float]] = {}
    with urllib.request.urlopen(url, timeout=1) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("#") or "translator=" not in line:
            continue
        name, _, rest = line.partition("{")
        labels, _, value = rest.rpartition("} ")
        translator = labels.split('translator="', 1)[1].split('"', 1)[0]
        metric = name.removeprefix("bizevents_translator_").removesuffix("_total")
        if metric in ("consumed", "emitted", "dropped", "dead_lettered"):
            counts.setdefault(translator, {})[metric] = float(value)
    return counts


SPARK = " ▁▂▃▄▅▆▇█"


def _sparkline(history: list[float], width: int = 60) -> str:
    """The whole run's agreement in ``width`` characters (evenly spaced samples)."""
    if len(history) > width:
        history = [history[i * len(history) // width] for i in range(width - 1)] + history[-1:]
    return "".join(SPARK[min(8, int(p / 100 * 8))] for p in history)


def _agreement_text(agreement: Agreement, history: list[float], totals: Agreement) -> str:
    colour = "green" if agreement.percent >= 100 else "red"
    totals_colour = "green" if totals.percent >= 100 else "red"
    return (
        f"[bold]orders: status in PostgreSQL vs the latest business event[/]  "
        f"[{colour} bold]{agreement.percent:5.1f} % agree[/]\n"
        f"[{colour}]{_sparkline(history)}[/]  {agreement.agree} agree · "
        f"{agreement.disagree} disagree · {agreement.unseen} not yet seen\n"
        f"[bold]orders: total in PostgreSQL vs the latest OrderPlaced[/]  "
        f"[{totals_colour} bold]{totals.percent:5.1f} % agree[/]"
    )


def _view(tally: Tally, topics: list[str], story: bool) -> Group:
    with tally.lock:
        counts = Table(title="per translator (this run)", title_justify="left")
        for column in ("translator", "consumed", "emitted", "dropped", "dead-lettered"):
            counts.add_column(column, justify="right" if column != "translator" else "left")
        scraped = tally.counts()
        for translator, values in sorted(scraped.items()):
            counts.add_row(
                translator,
                *(
                    f"{values.get(k, 0):.0f}"
                    for k in ("consumed", "emitted", "dropped", "dead_lettered")
                ),
            )
        for translator, seen in sorted(tally.per_translator.items()):
            if translator not in scraped:  # the transaction worker's: events seen
                counts.add_row(f"{translator} (transactions)", "", str(seen), "", "")
        per_topic = Table(
            title=f"business topics ({tally.load_steps} store actions so far; "
            f"{tally.orders_with_total} of {tally.orders_placed} OrderPlaced with a total "
            "other than 0.00)",
            title_justify="left",
        )
        per_topic.add_column("topic")
        per_topic.add_column("events", justify="right")
        for topic in topics:
            per_topic.add_row(topic, str(tally.per_topic.get(topic, 0)))
        recent = Table(title="latest events", title_justify="left")
        recent.add_column("translator")
        recent.add_column("event")
        for row in tally.recent:
            recent.add_row(*row)
        parts: list[Any] = [Text.from_markup(f"[bold cyan]{tally.step}[/]")]
        if story:
            agreement = tally.book.agreement(tally.database)
            totals = tally.book.totals_agreement(tally.totals)
            parts.append(Text.from_markup(_agreement_text(agreement, tally.history, totals)))
    return Group(*parts, counts, per_topic, recent)
