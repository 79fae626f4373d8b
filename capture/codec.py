"""What both sources' table codecs share: the envelope schemas as the registry keeps
them, and the Confluent frames their records start with once it gave the ids."""

from __future__ import annotations

import json

from bizevents.contracts.technical import EnvelopeSchemas
from bizevents.plumbing.framing import header


class RegisteredCodec:
    """The registration side of a table codec (PostgreSQL's ``TableCodec``, MySQL's
    ``MyTableCodec``): its schemas go to the registry, the ids come back."""

    schemas: EnvelopeSchemas
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    #: the frames records are written with; empty until the registry gave the ids
    _key_frame: bytes = b""
    _value_frame: bytes = b""

    def key_schema_json(self) -> str | None:
        """The key schema as registered (``None`` for a table without key columns)."""
        return None if self.schemas.key is None else json.dumps(self.schemas.key)

    def value_schema_json(self) -> str:
        """The value (envelope) schema as registered."""
        return json.dumps(self.schemas.value)

    def set_schema_ids(self, key_id: int | None, value_id: int) -> None:
        """The ids the registry gave; events are framed with them from now on."""
        self.key_schema_id = key_id
        self.value_schema_id = value_id
        self._key_frame = b"" if key_id is None else header(key_id)
        self._value_frame = header(value_id)
