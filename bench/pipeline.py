"""The translation core alone: µs per record, per stage, of ``Pipeline.process``.

No broker and no registry process: the schemas live in confluent-kafka's in-memory
mock registry. The records are ``bench/translate.py``'s (orders placed, paid,
touched, shipped of the store's ``orders`` table, 3 of 4 give events), run through
``orders@2`` with the worker's own decoder and serializer. Prints the whole
``Pipeline.process`` and each stage measured on its own (decode, translate, stamp: the
lineage's bytes and headers, serialize: each over the previous stage's output), the
median of ``--repeat`` runs, then the cost of one event id, then the floor under decode:
the codec candidates side by side, the envelope's bytes read alone by the compiled
reader (the project's C extension), the generated reader, fastavro's C reader and cavro
(a compiled library, from the dev group), converted and raw, beside the 20 µs per record
the 50,000/s target leaves; then a 40-column table with and without a projection.

    .venv/bin/python bench/pipeline.py [--records 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile Pipeline.process")
    args = parser.parse_args()

    import confluent_kafka.schema_registry as registry_module
    from bizevents_store.translators import orders_v2
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from translate import envelopes  # bench/translate.py's records

    from bizevents.contracts.business import BusinessEvent
    from bizevents.contracts.change import Change
    from bizevents.contracts.envelope import ChangeEvent
    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AutoDecoder
    from bizevents.translators.lineage import Stamper, contract_name, origin_of
    from bizevents.translators.pipeline import Pipeline, SourceRecord

    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    server = "bench"
    # envelopes() registers its schemas through the registry URL it is given; hand it
    # the in-memory registry instead.
    real = registry_module.SchemaRegistryClient
    registry_module.SchemaRegistryClient = lambda _config: client  # type: ignore[assignment,misc]
    try:
        records = envelopes(server, "mock://bench", args.records)
    finally:
        registry_module.SchemaRegistryClient = real  # type: ignore[misc]
    topic = f"{server}.store.orders"
    sample = [SourceRecord(topic, 0, i, k, v) for i, (k, v) in enumerate(records)]
    n = len(sample)

    def lookup(schema_id: int) -> str:
        return str(client.get_schema(schema_id).schema_str)

    decoder = AutoDecoder(lookup)
    serializer = BusinessSerializer(client)
    pipeline = Pipeline([orders_v2], decoder, serializer)
    pipeline.process(sample[:200])  # warm the caches: schemas, writers, registrations

    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(pipeline.process, sample)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return

    # The worker runs the core 1,000 records at a time and drops the results: so do
    # the figures here (holding every output alive makes the collector's full passes
    # the largest cost, which the worker does not have).
    chunks = [sample[i : i + 1000] for i in range(0, n, 1000)]
    gc.collect()

    def process() -> None:
        for chunk in chunks:
            pipeline.process(chunk)

    wholes = runs(args.repeat, process)
    whole = statistics.median(wholes)
    # the same without orders@2's changes declaration: every update's rows decoded
    import dataclasses

    undeclared = Pipeline([dataclasses.replace(orders_v2, changes=None)], decoder, serializer)
    undeclared.process(sample[:200])

    def process_undeclared() -> None:
        for chunk in chunks:
            undeclared.process(chunk)

    without = statistics.median(runs(args.repeat, process_undeclared))

    # the pipeline's lineage path: the change's part once, the translator's part once
    stamper = Stamper(orders_v2.name, orders_v2.version, topic, 0, False)
    per_run: dict[str, list[float]] = {k: [] for k in ("decode", "translate", "stamp", "serialize")}
    events = 0
    for _ in range(args.repeat):
        spent = dict.fromkeys(per_run, 0.0)
        events = 0
        for chunk in chunks:
            started = time.process_time()
            decoded = [decoder.decode(r.key, r.value, None, r.headers) for r in chunk]
            spent["decode"] += time.process_time() - started
            started = time.process_time()
            translated = [
                (e, orders_v2.translate(Change(e))) for e in decoded if isinstance(e, ChangeEvent)
            ]
            spent["translate"] += time.process_time() - started
            started = time.process_time()
            stamped: list[tuple[BusinessEvent, bytes]] = []
            for event, produced in translated:
                origin = origin_of(event)
                ordinals: dict[str, int] = {}
                for business in produced:
                    contract = contract_name(type(business))
                    ordinal = ordinals[contract] = ordinals.get(contract, -1) + 1
                    _, lineage, _ = stamper.wire(origin, contract, ordinal)
                    stamped.append((business, lineage))
            spent["stamp"] += time.process_time() - started
            started = time.process_time()
            for business, lineage in stamped:
                serializer(business, None, lineage)
            spent["serialize"] += time.process_time() - started
            events += len(stamped)
        for k, v in spent.items():
            per_run[k].append(v)
    stages = {k: statistics.median(v) for k, v in per_run.items()}
    t_decode, t_translate, t_stamp, t_serialize = stages.values()
    staged = t_decode + t_translate + t_stamp + t_serialize

    def us(seconds: float) -> str:
        return f"{seconds / n * 1e6:6.2f} µs/record"

    print(f"{n:,} records of {topic}, {events:,} events (median of {args.repeat} runs)")
    print(f"  decode      {us(t_decode)}  {t_decode / staged:4.0%}")
    print(f"  translate   {us(t_translate)}  {t_translate / staged:4.0%}")
    print(f"  stamp       {us(t_stamp)}  {t_stamp / staged:4.0%}")
    print(
        f"  serialize   {us(t_serialize)}  {t_serialize / staged:4.0%}  (per event: "
        f"{t_serialize / max(events, 1) * 1e6:.2f} µs)"
    )
    print(f"  sum         {us(staged)}")
    print(
        f"Pipeline.process {us(whole)} (spread {min(wholes) / n * 1e6:.2f}-"
        f"{max(wholes) / n * 1e6:.2f}) = {n / whole:,.0f} records/s"
    )

    print(
        f"  without the declaration changes=['status'] {us(without)}: the touched orders "
        "(a quarter, updated_at only) are decoded and handed to the translator"
    )

    event_ids(max(args.repeat, 3))
    codecs([r.value for r in sample if r.value is not None], lookup, max(args.repeat, 3))
    wide(n, max(args.repeat, 3), client)


def _read_all(reader: Callable[[bytes], object], values: Sequence[bytes]) -> list[object]:
    return [reader(v) for v in values]


def runs(repeat: int, run: Callable[[], object]) -> list[float]:
    """CPU seconds of each of ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        times.append(time.process_time() - started)
    return times


def event_ids(repeat: int, count: int = 200_000) -> None:
    """The cost of one event id: the lineage's compiled ``event_id`` (its SHA-1 from
    libcrypto since issue 26, a hand-written one before), beside ``uuid.uuid5``."""
    from bizevents.translators import lineage

    namespace = lineage.EVENT_ID_NAMESPACE
    names = [f'bench.store.orders|c|0/{1000 + i:X}|{{"id":{i}}}|orders|2' for i in range(1000)]
    names *= count // len(names)
    compiled = lineage._compiled
    if compiled is not None:
        make, raw = compiled.event_id, namespace.bytes

        def run() -> None:
            for name in names:
                make(raw, name)

        spent = runs(repeat, run)
        print(
            f"one event id: {statistics.median(spent) / len(names) * 1e9:.0f} ns "
            f"(spread {min(spent) / len(names) * 1e9:.0f}-{max(spent) / len(names) * 1e9:.0f}, "
            f"the lineage's extension, median of {repeat} runs)"
        )

    def python() -> None:
        for name in names:
            str(uuid.uuid5(namespace, name))

    spent = runs(repeat, python)
    print(f"  uuid.uuid5 for comparison: {statistics.median(spent) / len(names) * 1e9:.0f} ns")


def codecs(values: list[bytes], lookup: Callable[[int], str], repeat: int) -> None:
    """The codec candidates side by side on the same envelopes' bytes, nothing built
    after the read: the compiled and generated readers, fastavro's C reader and cavro
    (a compiled Avro library), each with logical types converted and raw; beside the
    budget per record that the worker target (50,000/s, Kafka included) leaves."""
    import io
    import statistics

    import fastavro

    from bizevents.contracts.avro_codegen import compile_reader
    from bizevents.contracts.avro_codegen.native import AVAILABLE, compile_native_reader

    schema_id = int.from_bytes(values[0][1:5], "big")
    text = lookup(schema_id)
    parsed = fastavro.parse_schema(json.loads(text))
    raw_parsed = fastavro.parse_schema(json.loads(text.replace('"logicalType"', '"_logical"')))
    read, read_raw = compile_reader(parsed), compile_reader(raw_parsed)
    readers: dict[str, Callable[[bytes], object]] = {}
    if AVAILABLE:
        native, native_raw = compile_native_reader(parsed), compile_native_reader(raw_parsed)
        readers["compiled reader (the project's C)"] = lambda v: native(v, 5)
        readers["compiled reader, raw"] = lambda v: native_raw(v, 5)
    readers |= {
        "generated reader (the project's)": lambda v: read(v, 5),
        "generated reader, raw": lambda v: read_raw(v, 5),
        "fastavro schemaless_reader (C)": lambda v: fastavro.schemaless_reader(
            io.BytesIO(v[5:]), parsed
        ),
        "fastavro, raw": lambda v: fastavro.schemaless_reader(io.BytesIO(v[5:]), raw_parsed),
    }
    try:
        import cavro
    except ImportError:
        cavro = None
    if cavro is not None:
        logical = cavro.Schema(text)
        raw = cavro.Schema(text, cavro.DEFAULT_OPTIONS.replace(logical_types=()))
        readers["cavro 1.0 (C)"] = lambda v: logical.binary_decode(v[5:])
        readers["cavro, raw"] = lambda v: raw.binary_decode(v[5:])
    print(f"reading the value bytes alone, {len(values):,} envelopes, median of {repeat} runs:")
    for name, reader in readers.items():
        per = [t / len(values) * 1e6 for t in runs(repeat, partial(_read_all, reader, values))]
        print(
            f"  {name:<34} {statistics.median(per):6.2f} µs/record "
            f"(spread {min(per):.2f}-{max(per):.2f})"
        )
    if cavro is None:
        print("  cavro: not installed (pip install cavro==1.0.0 to compare)")
    print(f"  the 50,000/s target leaves {1e6 / 50_000:.0f} µs/record for everything")


def wide(count: int, repeat: int, client: object) -> None:
    """A legacy table of 40 columns whose translator reads 5 (one change in four gives
    an event): the core with the translator's declaration and without it."""
    import statistics

    from bizevents.contracts.serde import BusinessSerializer
    from bizevents.contracts.technical import AvroDecoder, AvroEncoder
    from bizevents.translators.pipeline import Pipeline, SourceRecord
    from tests.translators.wide import WIDE, changes, deals, deals_undeclared

    encoder = AvroEncoder(WIDE, 1, 2)
    schemas = {1: encoder.schemas.key, 2: encoder.schemas.value}
    sample = []
    for offset, event in enumerate(changes(count)):
        key, value = encoder.encode(event)
        sample.append(SourceRecord(WIDE.namespace, 0, offset, key, value))
    chunks = [sample[i : i + 1000] for i in range(0, len(sample), 1000)]
    serializer = BusinessSerializer(client)  # type: ignore[arg-type]
    print(f"{len(sample):,} records of {WIDE.namespace} (40 columns), median of {repeat} runs:")
    figures = {}
    for label, chosen in (("every column", deals_undeclared), ("5 declared, ops u", deals)):
        pipeline = Pipeline([chosen], AvroDecoder(schemas.__getitem__), serializer)
        pipeline.process(sample[:200])
        gc.collect()

        def process(pipeline: Pipeline = pipeline) -> None:
            for chunk in chunks:
                pipeline.process(chunk)

        times = runs(repeat, process)
        per = [t / len(sample) * 1e6 for t in times]
        figures[label] = statistics.median(per)
        print(
            f"  {label:<18} {statistics.median(per):6.2f} µs/record "
            f"(spread {min(per):.2f}-{max(per):.2f}) = "
            f"{len(sample) / statistics.median(times):,.0f} records/s"
        )
    ratio = figures["every column"] / figures["5 declared, ops u"]
    print(f"  the declaration makes the core {ratio:.2f}x as fast on this table")


if __name__ == "__main__":
    main()
