"""Parked keys as people read and type them (bizevents.cli.keys); the registry here is
an address known to be closed, so framed keys fall back to their hex."""

from __future__ import annotations

from bizevents.cli.keys import KeyReader
from bizevents.plumbing.settings import RegistrySettings

FRAMED = bytes.fromhex("000000000112")  # schema id 1, Avro {"id": 9}


def test_a_text_key_is_its_json_string_and_taken_either_way(closed_address: str) -> None:
    keys = KeyReader(RegistrySettings(url=f"http://{closed_address}"))
    assert keys.show(b"42") == '"42"'
    assert all(keys.matches(b"42", typed) for typed in ('"42"', "42", "3432"))
    assert not keys.matches(b"42", "43")


def test_without_a_registry_a_framed_key_is_its_hex(closed_address: str) -> None:
    keys = KeyReader(RegistrySettings(url=f"http://{closed_address}"))
    assert keys.show(FRAMED) == "000000000112"
    assert keys.matches(FRAMED, "000000000112") and keys.matches(FRAMED, "000000000112".upper())
    assert not keys.matches(FRAMED, '{"id": 9}')
    assert keys.show(b"\x00\x01") == "0001"  # framed-looking bytes that are not Avro
