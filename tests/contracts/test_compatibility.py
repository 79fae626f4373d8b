"""The compatibility verdict against the Avro specification's schema resolution rules."""

from __future__ import annotations

from typing import Any

import pytest

from bizevents.contracts.compatibility import (
    CompatibilityLevel,
    InvalidSchemaError,
    check,
    parse_schema,
    reader_problems,
)
from bizevents.plumbing.errors import ConfigError

Json = dict[str, Any]


def rec(*fields: Json, name: str = "Order", **extra: Any) -> Json:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> Json:
    return {"name": name, "type": type_, **extra}


def enum(*symbols: str, name: str = "Status", **extra: Any) -> Json:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


ID = f("id", "long")
BASE = rec(ID)
ADDED_DEFAULT = rec(ID, f("note", "string", default=""))
ADDED_REQUIRED = rec(ID, f("note", "string"))


def one(type_: Any, **extra: Any) -> Json:
    """A record whose single field ``v`` has the given type."""
    return rec(f("v", type_, **extra))


LINKED = rec(f("value", "int"), f("next", ["null", "Order"], default=None))
LINKED_PLUS = rec(
    f("value", "int"), f("next", ["null", "Order"], default=None), f("tag", "string", default="")
)
CUSTOMER_V1 = rec(ID, f("customer", rec(f("name", "string"), name="Customer")))
CUSTOMER_V2 = rec(
    ID, f("customer", rec(f("name", "string"), f("email", "string"), name="Customer"))
)

# (id, new schema, existing schemas oldest first, level, expected verdict)
# fmt: off
CASES: list[tuple[str, Json, list[Json], CompatibilityLevel, bool]] = [
    # fields added and removed
    ("add-field-with-default-backward", ADDED_DEFAULT, [BASE], CompatibilityLevel.BACKWARD, True),
    ("add-field-no-default-backward", ADDED_REQUIRED, [BASE], CompatibilityLevel.BACKWARD, False),
    ("add-field-no-default-forward", ADDED_REQUIRED, [BASE], CompatibilityLevel.FORWARD, True),
    ("add-field-no-default-full", ADDED_REQUIRED, [BASE], CompatibilityLevel.FULL, False),
    ("add-field-with-default-full", ADDED_DEFAULT, [BASE], CompatibilityLevel.FULL, True),
    ("remove-field-backward", BASE, [ADDED_REQUIRED], CompatibilityLevel.BACKWARD, True),
    ("remove-field-no-default-forward", BASE, [ADDED_REQUIRED], CompatibilityLevel.FORWARD, False),
    ("remove-field-with-default-forward", BASE, [ADDED_DEFAULT], CompatibilityLevel.FORWARD, True),
    ("remove-field-with-default-full", BASE, [ADDED_DEFAULT], CompatibilityLevel.FULL, True),
    ("add-nullable-field-null-default", rec(ID, f("n", ["null", "string"], default=None)),
     [BASE], CompatibilityLevel.FULL, True),
    ("nested-record-field-added-no-default", CUSTOMER_V2, [CUSTOMER_V1],
     CompatibilityLevel.BACKWARD, False),
    ("nested-record-field-added-forward", CUSTOMER_V2, [CUSTOMER_V1],
     CompatibilityLevel.FORWARD, True),
    # type promotions
    ("promote-int-to-long-backward", one("long"), [one("int")], CompatibilityLevel.BACKWARD, True),
    ("promote-int-to-long-forward", one("long"), [one("int")], CompatibilityLevel.FORWARD, False),
    ("narrow-long-to-int-backward", one("int"), [one("long")], CompatibilityLevel.BACKWARD, False),
    ("promote-int-to-float", one("float"), [one("int")], CompatibilityLevel.BACKWARD, True),
    ("promote-long-to-double", one("double"), [one("long")], CompatibilityLevel.BACKWARD, True),
    ("promote-float-to-double", one("double"), [one("float")], CompatibilityLevel.BACKWARD, True),
    ("narrow-double-to-float", one("float"), [one("double")], CompatibilityLevel.BACKWARD, False),
    ("string-to-bytes-full", one("bytes"), [one("string")], CompatibilityLevel.FULL, True),
    ("string-to-int", one("int"), [one("string")], CompatibilityLevel.BACKWARD, False),
    ("boolean-to-int", one("int"), [one("boolean")], CompatibilityLevel.BACKWARD, False),
    ("record-to-enum", one(enum("A")), [one(rec(name="Status"))],
     CompatibilityLevel.BACKWARD, False),
    # enums
    ("enum-add-symbol-backward", one(enum("A", "B", "C")), [one(enum("A", "B"))],
     CompatibilityLevel.BACKWARD, True),
    ("enum-add-symbol-forward", one(enum("A", "B", "C")), [one(enum("A", "B"))],
     CompatibilityLevel.FORWARD, False),
    ("enum-add-symbol-forward-old-has-default", one(enum("A", "B", "C")),
     [one(enum("A", "B", default="A"))], CompatibilityLevel.FORWARD, True),
    ("enum-remove-symbol-backward", one(enum("A")), [one(enum("A", "B"))],
     CompatibilityLevel.BACKWARD, False),
    ("enum-remove-symbol-backward-new-default", one(enum("A", "Z", default="Z")),
     [one(enum("A", "B"))], CompatibilityLevel.BACKWARD, True),
    ("enum-rename-no-alias", one(enum("A", name="State")), [one(enum("A"))],
     CompatibilityLevel.BACKWARD, False),
    ("enum-rename-with-alias", one(enum("A", name="State", aliases=["Status"])),
     [one(enum("A"))], CompatibilityLevel.BACKWARD, True),
    ("enum-field-default-is-not-field-default", rec(ID, f("s", enum("A", default="A"))),
     [BASE], CompatibilityLevel.BACKWARD, False),
    # aliases of named types and fields
    ("record-rename-no-alias", rec(ID, name="Purchase"), [BASE],
     CompatibilityLevel.BACKWARD, False),
    ("record-rename-short-alias", rec(ID, name="Purchase", aliases=["Order"]), [BASE],
     CompatibilityLevel.BACKWARD, True),
    ("record-rename-full-alias", rec(ID, name="Purchase", aliases=["shop.Order"]), [BASE],
     CompatibilityLevel.BACKWARD, True),
    ("record-rename-other-namespace-alias", rec(ID, name="Purchase", aliases=["other.Order"]),
     [BASE], CompatibilityLevel.BACKWARD, False),
    ("record-namespace-change", {**BASE, "namespace": "sales"}, [BASE],
     CompatibilityLevel.FULL, True),
    ("field-rename-with-alias", rec(f("order_id", "long", aliases=["id"])), [BASE],
     CompatibilityLevel.BACKWARD, True),
    ("field-rename-no-alias", rec(f("order_id", "long")), [BASE],
     CompatibilityLevel.BACKWARD, False),
    ("field-alias-only-in-writer", rec(f("id", "long")),
     [rec(f("order_id", "long", aliases=["id"]))], CompatibilityLevel.BACKWARD, False),
    # unions
    ("union-widen-backward", one(["null", "string", "int"]), [one(["null", "string"])],
     CompatibilityLevel.BACKWARD, True),
    ("union-widen-forward", one(["null", "string", "int"]), [one(["null", "string"])],
     CompatibilityLevel.FORWARD, False),
    ("plain-to-union-full-backward", one(["null", "string"]), [one("string")],
     CompatibilityLevel.BACKWARD, True),
    ("union-to-plain-backward", one("string"), [one(["null", "string"])],
     CompatibilityLevel.BACKWARD, False),
    ("union-to-plain-all-branches-promote", one("long"), [one(["int", "long"])],
     CompatibilityLevel.BACKWARD, True),
    ("union-branch-promotes", one(["null", "double"]), [one(["null", "int"])],
     CompatibilityLevel.BACKWARD, True),
    # arrays, maps, fixed
    ("array-items-promote", one({"type": "array", "items": "long"}),
     [one({"type": "array", "items": "int"})], CompatibilityLevel.BACKWARD, True),
    ("array-items-narrow", one({"type": "array", "items": "int"}),
     [one({"type": "array", "items": "long"})], CompatibilityLevel.BACKWARD, False),
    ("array-to-map", one({"type": "map", "values": "int"}),
     [one({"type": "array", "items": "int"})], CompatibilityLevel.BACKWARD, False),
    ("map-values-string-to-int", one({"type": "map", "values": "int"}),
     [one({"type": "map", "values": "string"})], CompatibilityLevel.BACKWARD, False),
    ("map-of-records-field-added-with-default",
     one({"type": "map", "values": rec(ID, f("x", "int", default=0), name="Line")}),
     [one({"type": "map", "values": rec(ID, name="Line")})], CompatibilityLevel.FULL, True),
    ("fixed-same-size", one({"type": "fixed", "name": "Hash", "size": 16}),
     [one({"type": "fixed", "name": "Hash", "size": 16})], CompatibilityLevel.FULL, True),
    ("fixed-size-change", one({"type": "fixed", "name": "Hash", "size": 32}),
     [one({"type": "fixed", "name": "Hash", "size": 16})], CompatibilityLevel.BACKWARD, False),
    # recursion
    ("recursive-add-field-with-default", LINKED_PLUS, [LINKED], CompatibilityLevel.FULL, True),
    # levels: latest only versus all versions
    ("backward-checks-latest-only", ADDED_REQUIRED, [BASE, ADDED_DEFAULT],
     CompatibilityLevel.BACKWARD, True),
    ("backward-transitive-checks-all", ADDED_REQUIRED, [BASE, ADDED_DEFAULT],
     CompatibilityLevel.BACKWARD_TRANSITIVE, False),
    ("forward-checks-latest-only", BASE, [ADDED_REQUIRED, ADDED_DEFAULT],
     CompatibilityLevel.FORWARD, True),
    ("forward-transitive-checks-all", BASE, [ADDED_REQUIRED, ADDED_DEFAULT],
     CompatibilityLevel.FORWARD_TRANSITIVE, False),
    ("full-checks-latest-only", BASE, [ADDED_REQUIRED, ADDED_DEFAULT],
     CompatibilityLevel.FULL, True),
    ("full-transitive-checks-all", BASE, [ADDED_REQUIRED, ADDED_DEFAULT],
     CompatibilityLevel.FULL_TRANSITIVE, False),
    ("none-accepts-anything", one("string"), [one("int")], CompatibilityLevel.NONE, True),
    ("first-schema-always-compatible", ADDED_REQUIRED, [],
     CompatibilityLevel.FULL_TRANSITIVE, True),
]
# fmt: on


@pytest.mark.parametrize(
    ("new", "existing", "level", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_verdict_follows_schema_resolution(
    new: Json, existing: list[Json], level: CompatibilityLevel, expected: bool
) -> None:
    """Each case gets the verdict Avro's schema resolution rules give."""
    result = check(new, existing, level)
    assert result.is_compatible is expected, result.messages
    assert bool(result.messages) is not expected


def test_message_names_the_field_path() -> None:
    """A missing field is reported with its dotted path from the root record."""
    result = check(CUSTOMER_V2, [CUSTOMER_V1], "backward")
    assert result.messages == (
        "new schema cannot read data written with schema 1: reader field "
        "'Order.customer.email' has no default and is missing in the writer",
    )


def test_labels_name_the_versions_and_newest_comes_first() -> None:
    """Transitive checks report each failing version, newest first, by its label."""
    result = check(ADDED_REQUIRED, [BASE, BASE], "BACKWARD_TRANSITIVE", labels=["v1", "v2"])
    assert [m.split(":")[0] for m in result.messages] == [
        "new schema cannot read data written with v2",
        "new schema cannot read data written with v1",
    ]


def test_reader_problems_reports_each_cause() -> None:
    """Problems in several fields are all listed, not only the first."""
    old = rec(ID, f("a", "string"), f("b", enum("A", "B")))
    new = rec(ID, f("a", "int"), f("b", enum("A")), f("c", "int"))
    problems = reader_problems(reader=new, writer=old)
    assert len(problems) == 3
    assert any("'Order.a'" in p and "string" in p for p in problems)
    assert any("'Order.b'" in p and "B" in p for p in problems)
    assert any("'Order.c'" in p for p in problems)


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param('{"type": "nope"}', id="unknown-type"),
        pytest.param(one("int", default="zero"), id="default-wrong-type"),
        pytest.param(one(["null", "int"], default=1), id="union-default-not-first-branch"),
        pytest.param(one(enum("A", "A")), id="duplicate-enum-symbol"),
        pytest.param({"type": "record", "name": "R"}, id="record-without-fields"),
    ],
)
def test_invalid_schemas_are_refused(schema: Any) -> None:
    """Invalid Avro raises InvalidSchemaError, a ContractError."""
    with pytest.raises(InvalidSchemaError):
        parse_schema(schema)


def test_unknown_level_is_a_config_error() -> None:
    """A misspelt level fails with a sentence listing the valid ones."""
    with pytest.raises(ConfigError, match="BACKWARD_TRANSITIVE"):
        check(BASE, [BASE], "SIDEWAYS")
