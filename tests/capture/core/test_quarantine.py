"""Capture quarantine's pure parts: the parked-key state, the dead-letter context, the
choice of a key's parked changes, and the converter seam (no broker, no database)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.core.quarantine import CAPTURE, HEADER_CAPTURE_CONTEXT, parked_changes
from bizevents.capture.postgres.messages import Column, Relation
from bizevents.capture.postgres.quarantine import relation_of, relation_record
from bizevents.capture.postgres.types import PgTypeMapper, register_converter
from bizevents.contracts.business import HEADER_SOURCE_TOPIC
from bizevents.plumbing.parking import PARKED_HEADER, ParkedKeys, ref_key

REF = (CAPTURE, "srv.s.t", -1, b"\x01")


def test_parked_keys_fold_as_compaction_would() -> None:
    keys = ParkedKeys(bound=2)
    parked = keys.park(REF, 10, "capture", "bad")
    behind = keys.park(REF, 20, "parked", "key parked since 0/A")
    assert keys.parked[REF].first == 10 and keys.parked[REF].last == 20
    unparked = keys.unpark(REF, 20, "redriven")
    restored = ParkedKeys()
    for value in (parked, behind):
        restored.apply(ref_key(REF), value)
    assert restored.parked[REF].count == 2 and restored.watched == {"srv.s.t": 1}
    restored.apply(ref_key(REF), unparked)
    assert not restored.parked and restored.skipped(REF, 20) and not restored.skipped(REF, 21)


def test_the_bound_counts_new_keys_only() -> None:
    keys = ParkedKeys(bound=1)
    keys.park(REF, 10, "capture", "bad")
    assert not keys.would_pass_bound(REF)
    assert keys.would_pass_bound((CAPTURE, "srv.s.t", -1, b"\x02"))


_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12)
_columns = st.builds(
    Column,
    st.integers(0, 1),
    _names,
    st.integers(0, 2**32 - 1),
    st.integers(-1, 2**31 - 1),
)


@given(
    st.builds(
        Relation,
        st.integers(0, 2**32 - 1),
        _names,
        _names,
        st.sampled_from("dnfi"),
        st.lists(_columns, min_size=1, max_size=6).map(tuple),
    )
)
def test_relation_context_round_trips_through_json(relation: Relation) -> None:
    data = json.loads(json.dumps({"relation": relation_record(relation)}))
    assert relation_of(data) == relation


@pytest.mark.parametrize("bad", [{}, {"relation": {"oid": "x"}}, {"relation": None}])
def test_a_context_that_is_not_one_says_so(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a capture context"):
        relation_of(bad)


class _Msg:
    def __init__(self, key: bytes, lsn: int, parked: bool = True, topic: str = "srv.s.t") -> None:
        context = json.dumps({"position": lsn}).encode()
        self._headers = [(HEADER_SOURCE_TOPIC, topic.encode()), (HEADER_CAPTURE_CONTEXT, context)]
        if parked:
            self._headers.append((PARKED_HEADER, b"1"))
        self._key = key
        self._value = f"raw {lsn}".encode()

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value


def test_parked_changes_are_the_keys_from_the_park_on_each_once_in_order() -> None:
    messages = [
        _Msg(b"\x01", 5),  # an earlier park's, before this one's first
        _Msg(b"\x01", 10),
        _Msg(b"\x02", 11),  # another key
        _Msg(b"\x01", 12, parked=False),  # not parked
        _Msg(b"\x01", 13, topic="srv.s.u"),  # another table's key of the same bytes
        _Msg(b"\x01", 14),
        _Msg(b"\x01", 10),  # parked twice across a restart
        _Msg(b"\x01", 20),
    ]
    found = parked_changes(messages, REF, 10)
    assert [c.position for c in found] == [10, 14, 20]
    assert found[0].raw == b"raw 10"


def test_a_registered_converter_replaces_the_builtin_until_unregistered() -> None:
    def lenient(text: str) -> Decimal:
        return Decimal(0) if text == "NaN" else Decimal(text)

    try:
        register_converter("numeric", lenient)
        assert PgTypeMapper().converter(1700)("NaN") == Decimal(0)
    finally:
        register_converter("numeric", None)
    assert PgTypeMapper().converter(1700)("NaN").is_nan()
    with pytest.raises(ValueError, match="not a built-in scalar type"):
        register_converter("no such type", lenient)


@pytest.mark.parametrize("args", [[], ["--key", "01", "--all"]])
def test_redrive_wants_one_key_or_all(tmp_path: Any, args: list[str]) -> None:
    from click.testing import CliRunner

    from bizevents.cli import main

    config = tmp_path / "capture.toml"
    config.write_text('server = "shop"\ntables = ["public.t"]\n')
    result = CliRunner().invoke(main, ["capture", "redrive", str(config), *args])
    assert result.exit_code == 1
    assert "--key HEX" in result.output and "Traceback" not in result.output


def test_discard_wants_a_reason(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from bizevents.cli import main

    config = tmp_path / "capture.toml"
    config.write_text('server = "shop"\ntables = ["public.t"]\n')
    args = ["capture", "discard", str(config), "--key", "01", "--reason", " "]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "--reason TEXT" in result.output and "Traceback" not in result.output


def test_a_request_for_a_key_unparked_before_its_answer_is_done() -> None:
    """A capture killed after a re-drive's unpark but before its answer carries the
    request out again after the restart: done, not refused."""
    from bizevents.capture.core.quarantine import Quarantine

    core = object.__new__(Quarantine)  # the request logic only: no Kafka, no source
    core.parking = ParkedKeys()
    core.describe = str
    assert core._not_parked(REF) == ("refused", "the key is not parked")
    core.parking.park(REF, 10, "capture", "bad")
    core.parking.unpark(REF, 12, "redriven")
    status, message = core._not_parked(REF)
    assert status == "done" and "up to 12" in message
