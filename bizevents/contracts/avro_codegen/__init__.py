"""Avro readers and writers generated per schema: the translation hot path's codec.

fastavro's ``schemaless_reader``/``schemaless_writer`` interpret the schema for every
datum (about 20 µs per Debezium envelope here, and 10 µs per business event through
confluent's ``AvroSerializer``). For one schema the work is always the same, so this
module writes it out once as straight-line Python (``exec`` of generated source, as
``capture/encoding.py`` does for its writer) and caches the function per schema.

Both sides are held to fastavro by tests (``tests/contracts/test_fast_*.py``):

* :func:`compile_reader` gives ``read(buf, pos) -> (datum, pos)`` producing exactly
  what ``fastavro.schemaless_reader`` gives for the same writer schema (logical types
  through fastavro's own ``LOGICAL_READERS``). It may raise anything on bad bytes;
  callers then run fastavro, whose verdict (its value or its error) stands. It also
  refuses an Avro int outside 32 bits, which fastavro reads (callers check that after
  fastavro).
* :func:`compile_model_writer` gives ``write(model) -> bytes`` writing a pydantic
  contract instance straight from its attributes, byte for byte what fastavro writes
  for ``to_dict(model)``. It raises :class:`Unsupported` at compile time for a shape it
  does not cover, and anything at run time for a value it does not take (callers then
  run the reference serializer, whose verdict stands).

The extension (``_native.c``, built by ``scripts/setup``) runs the same two walks in C:
:func:`bizevents.contracts.avro_codegen.native.compile_native_reader` and
:func:`~bizevents.contracts.avro_codegen.native.compile_native_writer` take the same arguments and
give the same results (the same bytes, and an error where the generated code raises),
held to the generated code by hypothesis tests; callers use them where it is built.

Covered: records, unions (with null or of several types, by index), null, boolean,
int, long, float, double, string, bytes, fixed, enum, array, map, and the logical
types fastavro converts (decimal, date, time, timestamps, uuid).
"""

from __future__ import annotations

from bizevents.contracts.avro_codegen.gen import Reader, Unsupported, read_int
from bizevents.contracts.avro_codegen.reader import compile_reader
from bizevents.contracts.avro_codegen.writer import ModelWriter, compile_model_writer

__all__ = [
    "ModelWriter",
    "Reader",
    "Unsupported",
    "compile_model_writer",
    "compile_reader",
    "read_int",
]
