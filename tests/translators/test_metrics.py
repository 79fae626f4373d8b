"""The translator worker's metrics: block counts, latency buckets, lag per partition held
and parked keys, as a scrape reads them."""

from __future__ import annotations

import functools

from bizevents.plumbing.parking import ParkedKeys
from bizevents.translators.metrics import WorkerStats, serve_metrics
from bizevents.translators.records import Counts
from tests.metrics import scrape


def test_blocks_add_up_per_translator_and_records_per_topic() -> None:
    stats = WorkerStats("g")
    stats.add("shop.public.things", {"things@1": Counts(consumed=3, emitted=2, dropped=1)})
    stats.add("shop.public.things", {"things@1": Counts(consumed=4, emitted=4)}, undecodable=2)
    stats.acked(7, now=1000.0)
    samples = scrape(functools.partial(serve_metrics, stats))
    things = (("group", "g"), ("translator", "things@1"))
    assert samples[("bizevents_translator_consumed_total", things)] == 7
    assert samples[("bizevents_translator_emitted_total", things)] == 6
    assert samples[("bizevents_translator_dropped_total", things)] == 1
    topic = (("group", "g"), ("topic", "shop.public.things"))
    assert samples[("bizevents_translate_undecodable_total", topic)] == 2
    assert samples[("bizevents_translate_acknowledged_total", (("group", "g"),))] == 7
    assert stats.blocks == 2


def test_latency_falls_in_the_first_bucket_that_holds_it() -> None:
    stats = WorkerStats("g")
    for seconds in (0.01, 0.03, 0.03, 120.0):
        stats.observe_latency(seconds)
    samples = scrape(functools.partial(serve_metrics, stats))

    def bucket(le: str) -> float:
        return samples[("bizevents_translate_latency_seconds_bucket", (("group", "g"), ("le", le)))]

    assert (bucket("0.01"), bucket("0.025"), bucket("0.05"), bucket("60.0")) == (1, 1, 3, 3)
    assert bucket("+Inf") == 4
    assert samples[("bizevents_translate_latency_seconds_sum", (("group", "g"),))] == 120.07


def test_lag_per_reader_of_the_partitions_still_held() -> None:
    stats = WorkerStats("g", readers={"t": ("a@1", "b@2")})
    stats.set_lag("t", 0, 5)
    stats.set_lag("t", 1, -3)  # a high watermark behind the block: nothing behind
    stats.set_lag("t", 2, 9)
    stats.forget_partitions([("t", 0), ("t", 1)])
    samples = scrape(functools.partial(serve_metrics, stats))
    lag = {
        (dict(labels)["translator"], dict(labels)["partition"]): value
        for (name, labels), value in samples.items()
        if name == "bizevents_translator_consumer_lag"
    }
    assert lag == {("a@1", "0"): 5, ("b@2", "0"): 5, ("a@1", "1"): 0, ("b@2", "1"): 0}


def test_parked_keys_of_row_and_transaction_translators_add_up() -> None:
    rows, transactions = ParkedKeys(), ParkedKeys()
    rows.per_translator.update({"orders": 2, "things": 1})
    transactions.per_translator.update({"orders": 3})
    stats = WorkerStats("g", parking=rows, tx_parking=transactions)
    samples = scrape(functools.partial(serve_metrics, stats))
    parked = {
        dict(labels)["translator"]: value
        for (name, labels), value in samples.items()
        if name == "bizevents_parked_keys"
    }
    assert parked == {"orders": 5, "things": 1}


def test_a_transaction_worker_shows_what_it_holds_open_and_back() -> None:
    """The transaction worker's open transactions and the partitions it holds back
    (docs/transactions.md, "Catching up") are gauges; a row worker has neither."""
    assert not [
        name
        for name, _ in scrape(functools.partial(serve_metrics, WorkerStats("g")))
        if name.startswith("bizevents_transactions_")
    ]
    stats = WorkerStats("g", tx_open=5_123, tx_held=3)
    samples = scrape(functools.partial(serve_metrics, stats))
    assert samples[("bizevents_transactions_open", (("group", "g"),))] == 5_123
    assert samples[("bizevents_transactions_held_partitions", (("group", "g"),))] == 3
