"""The ``path:`` output's files: Avro container files of replayed records (their schema,
a record's encoding, a file written a block at a time), shared by the row and the
transaction replay's file sinks."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bizevents.contracts.avro_codegen.native import compile_native_plan
from bizevents.contracts.binary import (
    NULL_BRANCH,
    SMALL,
    VALUE_BRANCH,
    blob,
    container_block,
    container_header,
    text,
    zigzag,
)
from bizevents.translators.pipeline import OutRecord

__all__ = ["FILE_SCHEMA", "AvroFile", "FileRecordEncoder"]


#: Avro schema of the records in ``path:`` output files.
FILE_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "ReplayedRecord",
    "namespace": "bizevents.replay",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"], "doc": "Confluent-framed Avro"},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"]},
                    ],
                },
            },
        },
        {"name": "event_id", "type": "string", "doc": "empty for a dead letter"},
        {"name": "translator", "type": "string"},
    ],
}


class AvroFile:
    """One Avro container file of ``FILE_SCHEMA`` records, written a block at a time."""

    #: Records (or bytes of them) per block: what a reader holds at once.
    BLOCK_RECORDS: Final = 4000
    BLOCK_BYTES: Final = 1 << 20

    def __init__(self, partial: Path, final: Path) -> None:
        self.partial = partial
        self.final = final
        self.handle = partial.open("wb")
        self.sync = os.urandom(16)
        self.handle.write(container_header(_FILE_SCHEMA_JSON, self.sync))
        self.parts: list[bytes] = []
        self.count = 0
        self.size = 0

    def add(self, encoded: bytes) -> None:
        self.parts.append(encoded)
        self.count += 1
        self.size += len(encoded)
        if self.count >= self.BLOCK_RECORDS or self.size >= self.BLOCK_BYTES:
            self.flush()

    def extend(self, encoded: Sequence[bytes]) -> None:
        """:meth:`add` of each, in order (the same blocks), without a call per record."""
        parts, count, size = self.parts, self.count, self.size
        records, limit = self.BLOCK_RECORDS, self.BLOCK_BYTES
        for body in encoded:
            parts.append(body)
            count += 1
            size += len(body)
            if count >= records or size >= limit:
                self.count = count
                self.flush()
                parts, count, size = self.parts, 0, 0
        self.count, self.size = count, size

    def flush(self) -> None:
        if self.count:
            self.handle.write(container_block(self.count, b"".join(self.parts), self.sync))
            self.parts, self.count, self.size = [], 0, 0

    def close(self) -> None:
        self.flush()
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.partial, self.final)  # a rerun of the range replaces it whole


_FILE_SCHEMA_JSON: Final = json.dumps(FILE_SCHEMA, separators=(",", ":"))
#: FILE_SCHEMA's write plan, run by the contracts' extension (None where it is not built).
_FILE_PLAN: Final = compile_native_plan(FILE_SCHEMA)


class FileRecordEncoder:
    """The Avro body of one ``FILE_SCHEMA`` record, from an output record (the strings
    that repeat, topics, translators and header names, are encoded once)."""

    def __init__(self) -> None:
        self._texts: dict[str, bytes] = {}
        #: The contracts' compiled writer of FILE_SCHEMA (records as tuples), or None.
        self._compiled = _FILE_PLAN

    def _text(self, value: str) -> bytes:
        found = self._texts.get(value)
        if found is None:
            found = self._texts[value] = text(value)
        return found

    def __call__(self, topic: str, record: OutRecord) -> bytes:
        if self._compiled is not None:
            try:
                return self._compiled(
                    (
                        topic,
                        record.key,
                        record.value,
                        record.headers,
                        record.event_id,
                        record.translator,
                    )
                )
            except (TypeError, ValueError, AttributeError):
                pass  # a part of another type than the plan writes: the Python decides
        return self.written(topic, record)

    def written(self, topic: str, record: OutRecord) -> bytes:
        """:meth:`__call__` in Python: where the extension is not built, for parts of
        other types than it takes, and the reference it is tested against."""
        key, value, headers = record.key, record.value, record.headers
        parts = [
            self._text(topic),
            NULL_BRANCH if key is None else VALUE_BRANCH + blob(key),
            NULL_BRANCH if value is None else VALUE_BRANCH + blob(value),
        ]
        if headers:
            parts.append(zigzag(len(headers)))
            texts = self._texts
            for k, v in headers:
                parts.append(texts.get(k) or self._text(k))
                if v is None:
                    parts.append(NULL_BRANCH)
                elif len(v) < 64:  # blob(v), inlined: a header value is short
                    parts += (VALUE_BRANCH, SMALL[len(v) << 1], v)
                else:
                    parts += (VALUE_BRANCH, blob(v))
        parts.append(SMALL[0])  # the end of the header array
        parts.append(text(record.event_id))
        parts.append(self._text(record.translator))
        return b"".join(parts)
