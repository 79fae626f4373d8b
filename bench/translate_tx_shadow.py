"""What a transaction translator's shadow costs the transaction core (docs/shadow.md).

The store's transactions of bench/translate_tx.py (an order with total 0, three items,
the total set: 5 changes and an END each) decoded, assembled and translated by
orders@3, without a shadow and with a copy of orders@3 in its shadow (identical events:
the comparison's usual case), alternately, in this process with an embedded schema
registry and no Kafka. It prints each run's changes per CPU-second of this process
(what the machine's load hides: wall-clock rates on a shared machine swing several
times over between runs) and the median ratio with/without.
The transaction worker also reads, assembles and routes every record, which a shadow
does not repeat: ``--kafka`` measures it, on a fresh embedded stack: the store's
transactions written to the technical topics once, then ``bizevents translate
--transactions`` (orders@3) run over them alternately without and with the copy in its
shadow (a plugin folder on its path), each run a new group reading everything; it
prints the rate between the first and the last OrderPlaced and the worker's changes
per CPU-second.

    .venv/bin/python bench/translate_tx_shadow.py [--transactions 4000] [--runs 3]
    .venv/bin/python bench/translate_tx_shadow.py --kafka [--transactions 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


#: The design's target for a shadow: the rate with one at least this share of without.
TARGET = 0.6
#: The technical topics' partitions (and so the worker's virtual partitions).
PARTITIONS = 4


def measure(client: Any, transactions: int, shadowed: bool) -> float:
    """Changes per CPU-second in through decode, assembly and orders@3 (with its
    shadow or not)."""
    from bizevents_store.translators import orders_v3
    from translate_tx import workload  # bench/translate_tx.py

    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.plumbing.registry import schema_lookup
    from bizevents.translators.assembly import Assembler, Part
    from bizevents.translators.txcore import TransactionCore

    namespace: dict[str, Any] = {}
    exec(PLUGIN, namespace)  # the copy the --kafka workers load, declared once
    copy = namespace["copy"]
    server = f"benchtxsh{int(time.time() * 1000) % 1_000_000}"
    records, ends = workload(server, client, transactions)
    decoder = AutoDecoder(schema_lookup(client))
    core = TransactionCore(
        [orders_v3], BusinessSerializer(client), shadows=[copy] if shadowed else []
    )

    def run(batch_ends: list[Any]) -> int:
        """Each transaction's changes (as many as its END counts), then its END."""
        assembler = Assembler(core.reads)
        taken = offset = 0
        for end in batch_ends:
            outcomes = []
            for r in records[taken : taken + end.event_count]:
                change = decoder.decode(r.key, r.value)
                assert isinstance(change, ChangeEvent)  # the workload writes no tombstones
                outcomes += assembler.feed(Part(offset, r, change=change))
                offset += 1
            taken += end.event_count
            outcomes += assembler.feed(Part(offset, r, record=end))
            offset += 1
            result = core.process(outcomes)
            if shadowed:
                compared = result.shadows["orders@103"]
                assert compared.unexpected(frozenset()) == 0, compared.as_dict()
        return taken

    run(ends[:20])  # warm: schemas fetched, writers compiled
    started = time.process_time()
    changes = run(ends)
    return changes / (time.process_time() - started)


PLUGIN = """
from bizevents.transactions import transaction_translator
from bizevents_store.translators import ORDER_EVENTS, orders_v3

copy = transaction_translator(
    name="orders",
    version=103,
    sources=list(orders_v3.sources),
    emits=ORDER_EVENTS,
    keys={table: list(columns) for table, columns in orders_v3.keys},
)(orders_v3.tx_func)
ALL = [copy]
"""


def shadow_figures(bootstrap: str, topic: str) -> int:
    """The changes orders@103's comparison holds in the shadows topic."""
    from bizevents.plumbing.kafka import read_latest
    from bizevents.translators.shadow import ShadowBook

    book = ShadowBook()
    for key, value in read_latest({"bootstrap.servers": bootstrap}, topic, "bench").items():
        book.load(key, value)
    found = book.total("orders@103")
    return 0 if found is None else found.changes


def through_kafka(transactions: int, runs: int) -> None:
    """Alternate runs of one transaction worker without and with the shadow."""
    import uuid

    from translate_tx import PlacedReader, fill_technical, run_workers, worker_env

    from bizevents.devstack import DevStack
    from bizevents.settings import DevSettings

    tmp = Path(tempfile.mkdtemp(prefix="bench-txsh-"))
    plugins = tmp / "plugins"
    info = plugins / "bench_txshadow-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-txshadow\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[bizevents.translators]\norders = bench_txshadow:ALL\n")
    (plugins / "bench_txshadow.py").write_text(PLUGIN)
    stack = DevStack(tmp / "stack", DevSettings(broker_port=0, registry_port=0, postgres_port=0))
    stack.up()
    try:
        endpoints = stack.endpoints()
        bootstrap, registry_url = endpoints.bootstrap_servers, endpoints.registry_url
        tag = uuid.uuid4().hex[:8]
        server = f"benchtxsh{tag}"
        changes, _ = fill_technical(bootstrap, registry_url, server, transactions, PARTITIONS)
        reader = PlacedReader(bootstrap, server)
        env = {
            **worker_env(bootstrap, registry_url, server, tag, PARTITIONS),
            "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
        }
        rates: dict[bool, list[float]] = {False: [], True: []}
        per_cpu: dict[bool, list[float]] = {False: [], True: []}
        try:
            for n in range(runs):
                for shadowed in (False, True):
                    group = f"bench-txsh-{n}-{int(shadowed)}-{tag}"
                    run_env = {
                        **env,
                        "BIZEVENTS_TRANSACTIONS__GROUP_ID": group,
                        "BIZEVENTS_TRANSLATE__GROUP_ID": group,
                    }
                    if shadowed:
                        run_env["BIZEVENTS_TRANSLATE__SHADOW"] = json.dumps(["orders@103"])
                    rate, _, spent = run_workers(run_env, 1, tmp, reader, transactions, 600)
                    if shadowed:  # the shadow did run: its comparison covers every change
                        compared = shadow_figures(bootstrap, f"{group}.shadows")
                        assert compared == changes, f"{compared} of {changes} changes compared"
                    rates[shadowed].append(rate * changes / transactions)
                    # the changes read between the first event and the last, per CPU-s
                    per_cpu[shadowed].append(
                        spent.orders * changes / transactions / spent.cpu["workers"]
                    )
                    print(
                        f"run {n + 1} {'with' if shadowed else 'without'} a shadow: "
                        f"{rates[shadowed][-1]:,.0f} changes/s, "
                        f"{per_cpu[shadowed][-1]:,.0f} changes per CPU-second",
                        flush=True,
                    )
        finally:
            reader.close()
    finally:
        stack.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    for what, figures in (("changes/s", rates), ("changes per CPU-second", per_cpu)):
        ratios = [w / o for w, o in zip(figures[True], figures[False], strict=True)]
        print(
            f"{what}: without {statistics.median(figures[False]):,.0f} "
            f"({min(figures[False]):,.0f}-{max(figures[False]):,.0f}), with a shadow "
            f"{statistics.median(figures[True]):,.0f} "
            f"({min(figures[True]):,.0f}-{max(figures[True]):,.0f}); with / without "
            f"{statistics.median(ratios):.2f} (runs: {', '.join(f'{r:.2f}' for r in ratios)};"
            f" target >= {TARGET})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kafka", action="store_true", help="Through Kafka, a worker.")
    args = parser.parse_args()
    if args.kafka:
        through_kafka(args.transactions, args.runs)
        return
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from bizevents.devstack.registry import run_in_thread

    with (
        tempfile.TemporaryDirectory(prefix="bench-txsh-registry-") as folder,
        run_in_thread(Path(folder)) as registry,
    ):
        client = SchemaRegistryClient({"url": registry.url})
        without, with_shadow = [], []
        for n in range(args.runs):  # alternate, so the machine's load hits both alike
            without.append(measure(client, args.transactions, False))
            with_shadow.append(measure(client, args.transactions, True))
            print(
                f"run {n + 1}: without {without[-1]:,.0f} changes/CPU-s, "
                f"with a shadow {with_shadow[-1]:,.0f} changes/CPU-s"
            )

    def line(values: list[float]) -> str:
        low, high = min(values), max(values)
        return f"{statistics.median(values):,.0f}/CPU-s (min {low:,.0f}, max {high:,.0f})"

    ratios = [w / o for w, o in zip(with_shadow, without, strict=True)]
    print(f"orders@3 alone:               {line(without)}")
    print(f"orders@3 with a shadow:       {line(with_shadow)}")
    print(
        f"with / without: {statistics.median(ratios):.2f} "
        f"(runs: {', '.join(f'{r:.2f}' for r in ratios)}); core alone, target >= {TARGET} "
        "for the worker"
    )


if __name__ == "__main__":
    main()
