"""Parked keys as people read and type them: the key's JSON (``{"id": 9}``).

A parked key is a record key's bytes; a Confluent-framed Avro key reads with its writer
schema from the registry, a UTF-8 key as its text. The commands that take a key (``dlq``
and ``capture parked``, ``redrive``, ``discard``) accept that JSON, or the key's hex.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bizevents.cli.kit import json_text
from bizevents.plumbing.settings import RegistrySettings


class KeyReader:
    """Shows keys as JSON and finds the key a person typed among parked ones."""

    def __init__(self, registry: RegistrySettings) -> None:
        self._registry = registry
        self._decode: Callable[[bytes | None], Any] | None = None
        self._shown: dict[bytes, str] = {}
        self._registry_away = False  # asked once: the other keys show in hex at once

    def _value(self, key: bytes) -> Any:
        """The key's value, or ``None`` when it reads as neither Avro nor text."""
        from bizevents.cli.read import decoder
        from bizevents.plumbing.registry import (
            RegistryUnavailableError,
            registry_client,
            schema_lookup,
        )

        if self._decode is None:
            client = registry_client({**self._registry.client_config(), "max.retries": 0})
            self._decode = decoder(schema_lookup(client))
        if self._registry_away and key[:1] == b"\x00":
            return None
        try:
            value = self._decode(key)
        except RegistryUnavailableError:
            self._registry_away = True
            return None  # the hex stands in
        except Exception:  # bytes framed like Avro that are not: the reader's many errors
            return None
        if isinstance(value, dict) and "base64" in value:
            return None  # framed with a schema this registry does not hold, or binary
        if isinstance(value, str) and not value.isprintable():
            return None
        return value

    def show(self, key: bytes) -> str:
        """The key's JSON (compact, as typed: ``{"id": 9}``), else its hex."""
        if key not in self._shown:
            value = self._value(key)
            self._shown[key] = (
                key.hex()
                if value is None
                else json.dumps(value, default=json_text, ensure_ascii=False)
            )
        return self._shown[key]

    def matches(self, key: bytes, given: str) -> bool:
        """Whether ``given`` (the key's JSON, a text key's text, or its hex) names ``key``."""
        if given.lower() == key.hex():
            return True
        shown = self.show(key)
        if shown == key.hex():
            return False
        value = json.loads(shown)
        if given == value:  # a text key, typed without its JSON quotes
            return True
        try:
            return bool(json.loads(given) == value)
        except ValueError:
            return False
