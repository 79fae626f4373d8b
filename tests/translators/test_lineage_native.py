"""The compiled lineage helpers (translators/_lineage.c) give what the Python
they replace gives: event ids, the lineage record's bytes and the headers, byte for byte."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.contracts.envelope import ChangeEvent, MySqlPosition, PgPosition, Source
from bizevents.contracts.exceptions import Coordinates
from bizevents.translators import lineage
from bizevents.translators.lineage import (
    EVENT_ID_NAMESPACE,
    Origin,
    Stamper,
    _identity,
    _origin,
    event_id,
    origin,
    origin_of,
)

SETTINGS = settings(max_examples=300, deadline=None)
TEXT = st.text(max_size=40)  # any code point: UTF-8 of 1 to 4 bytes, NULs included
OFFSETS = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_the_lineage_helpers_are_built() -> None:
    """scripts/setup builds translators/_lineage.c; without it lineage runs the Python and
    the tests below would compare it with itself."""
    assert lineage.COMPILED, "translators/_lineage.c is not built: run scripts/setup"


@SETTINGS
@given(name=st.text(max_size=200))
def test_event_ids_are_uuid5(name: str) -> None:
    assert lineage._compiled is not None
    expected = str(uuid.uuid5(EVENT_ID_NAMESPACE, name))
    assert lineage._compiled.event_id(EVENT_ID_NAMESPACE.bytes, name) == expected


def test_event_ids_are_uuid5_at_every_padding_boundary() -> None:
    """Every length from one block to four, in 1-, 2- and 4-byte characters: the last
    block's padding fits in it (under 56 bytes), spills into another (56 to 63), or
    starts a block of its own (a multiple of 64)."""
    assert lineage._compiled is not None
    for length in range(0, 256 - 16):
        for char in ("a", "é", "\U0001f600"):
            name = (char * length).encode()[:length].decode(errors="ignore")
            expected = str(uuid.uuid5(EVENT_ID_NAMESPACE, name))
            assert lineage._compiled.event_id(EVENT_ID_NAMESPACE.bytes, name) == expected, name


@SETTINGS
@given(offset=OFFSETS, position=TEXT, tx_id=st.none() | TEXT, identity=TEXT)
def test_a_changes_part_is_the_pythons(
    offset: int, position: str, tx_id: str | None, identity: str
) -> None:
    assert origin(identity, offset, position, tx_id) == _origin(identity, offset, position, tx_id)


@SETTINGS
@given(
    name=TEXT,
    version=st.integers(min_value=1, max_value=10**6),
    topic=st.none() | TEXT,
    partition=st.none() | st.integers(min_value=-1, max_value=2**31 - 1),
    replay=st.booleans(),
    identity=TEXT,
    contract=TEXT,
    ordinal=st.integers(min_value=0, max_value=2**40),
    offset=OFFSETS,
    position=TEXT,
    tx_id=st.none() | TEXT,
)
def test_an_events_wire_is_the_pythons(
    name: str,
    version: int,
    topic: str | None,
    partition: int | None,
    replay: bool,
    identity: str,
    contract: str,
    ordinal: int,
    offset: int,
    position: str,
    tx_id: str | None,
) -> None:
    stamper = Stamper(name, version, topic, partition, replay)
    shared = _origin(identity, offset, position, tx_id)
    wired = stamper.wire(shared, contract, ordinal)
    assert wired == stamper._wire(shared, contract, ordinal)
    assert wired[0] == event_id(identity, name, contract, ordinal)
    assert all(type(header) is tuple for header in wired[2])


KEY_VALUES = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | TEXT
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
)


#: LSNs whose either half may hold any hex digit, and some outside 64 bits.
LSNS = st.builds(
    lambda high, low: high << 32 | low,
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=0, max_value=2**32 - 1),
) | st.integers(min_value=-(2**65), max_value=2**66)


@SETTINGS
@given(
    key=st.none() | st.dictionaries(TEXT, KEY_VALUES, max_size=4),
    op=st.sampled_from(["c", "u", "d", "r"]),
    position=st.none()
    | st.builds(PgPosition, st.none() | LSNS, st.none() | st.integers(min_value=0, max_value=2**64))
    | st.builds(MySqlPosition, TEXT, st.integers(min_value=0), st.integers(min_value=0)),
    offset=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    table=st.none() | TEXT,
    given_table=st.booleans(),
    topic=st.none() | TEXT,
)
def test_a_changes_origin_is_the_pythons(
    key: dict[str, object] | None,
    op: str,
    position: PgPosition | MySqlPosition | None,
    offset: int | None,
    table: str | None,
    given_table: bool,
    topic: str | None,
) -> None:
    """The identity (with the key's canonical JSON), the change part and its headers,
    whatever the key and the position hold: values other than ints and strs go to the
    JSON encoder; LSNs outside 64 bits and MySQL's positions to the Python."""
    source = Source("postgresql", "shop", "shop", "public", table, 1, position=position)
    where = Coordinates(topic, 2, offset)
    change = ChangeEvent(op, source, None, {"id": 1}, key, coordinates=where)  # type: ignore[arg-type]
    text = None if position is None else str(position)
    tx = source.tx_id
    expected = origin(
        _identity(change, text),
        -1 if offset is None else offset,
        text or "",
        None if tx is None else str(tx),
        snapshot=op == "r",
    )
    qualified = source.qualified_table if given_table else None
    assert origin_of(change, qualified) == expected
    assert type(origin_of(change, qualified)) is Origin
    assert lineage._origin_of(change, qualified) == expected


def test_an_identity_longer_than_the_stack_buffer_is_the_pythons() -> None:
    """The compiled identity is built in a 256-byte buffer that grows: long names,
    tables and keys (escaped and not) give the Python's text."""
    source = Source(
        "postgresql", "s" * 300, "db", "public", "t" * 200, 1, position=PgPosition(1, 2)
    )
    for key in ({"k" * 300: "v" * 1000}, {"a": 1, "b\u00e9" * 100: "\u00e9\n" * 300, "c": 2**80}):
        change = ChangeEvent("u", source, None, {"id": 1}, key, coordinates=Coordinates("t", 0, 5))
        made = lineage._compiled.origin_of(
            Origin, change, None, lineage._CHANGE_HEADERS, PgPosition
        )
        assert made is not None
        assert made.identity == _identity(change, str(source.position))
        assert made == lineage._origin_of(change)


def test_the_usual_changes_origin_is_made_in_one_call() -> None:
    """A PostgreSQL position and an int key: the compiled origin_of answers (None would
    mean the Python did it)."""
    source = Source("postgresql", "shop", "shop", "public", "t", 1, position=PgPosition(2**40, 7))
    change = ChangeEvent(
        "u", source, None, {"id": 1}, {"id": 1}, coordinates=Coordinates("t", 0, 5)
    )
    made = lineage._compiled.origin_of(Origin, change, None, lineage._CHANGE_HEADERS, PgPosition)
    assert made == lineage._origin_of(change)
    assert made.identity == 'shop.public.t|u|100/0|{"id":1}'


ROWS = st.dictionaries(TEXT, KEY_VALUES, max_size=5)


@SETTINGS
@given(
    key=st.dictionaries(TEXT, KEY_VALUES, min_size=1, max_size=3),
    after=ROWS,
    positions=st.tuples(LSNS, LSNS).filter(lambda p: p[0] != p[1]),
    offsets=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    replay=st.booleans(),
)
def test_a_reads_id_is_its_rows_in_the_compiled_and_the_python_lineage(
    key: dict[str, object],
    after: dict[str, object],
    positions: tuple[int, int],
    offsets: tuple[int, int],
    replay: bool,
) -> None:
    """The same row read by two snapshots (other positions, other offsets): the same
    identity, ids and snapshot header, compiled and Python alike (the compiled origin_of
    leaves a read to the Python); each lineage keeps where its record was read."""
    wired = []
    for lsn, offset in zip(positions, offsets, strict=True):
        source = Source("postgresql", "shop", "shop", "public", "t", 1, position=PgPosition(lsn, 3))
        read = ChangeEvent("r", source, None, after, key, coordinates=Coordinates("t", 0, offset))  # type: ignore[arg-type]
        assert (
            lineage._compiled.origin_of(Origin, read, None, lineage._CHANGE_HEADERS, PgPosition)
            is None
        )
        made = origin_of(read)
        assert made == lineage._origin_of(read)
        assert ("bizevents.snapshot", b"true") in made.headers
        stamper = Stamper("things", 1, "t", 0, replay)
        wire = stamper.wire(made, "shop.Thing", 0)
        assert wire == stamper._wire(made, "shop.Thing", 0)
        assert (b"%d" % offset) in dict(wire[2]).values()
        wired.append((made.identity, wire[0]))
    assert wired[0] == wired[1]
