"""Snapshot conditions as data (bizevents.capture.core.filters): what parses, what is
refused with a sentence, the columns checked, SQL with bound parameters, and (property
tests) that any text either parses or is refused with FilterError, and that a
condition's text reads back into the same structure."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bizevents.capture.core.filters import (
    MAX_CHARS,
    MAX_DEPTH,
    And,
    Between,
    Compare,
    Condition,
    FilterError,
    InList,
    IsNull,
    Like,
    Not,
    Or,
    condition_text,
    parse_condition,
    resolve,
    to_sql,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("id > 3", Compare(("id",), ">", (3,))),
        ("id != -3", Compare(("id",), "<>", (-3,))),
        ("price <= 12.50", Compare(("price",), "<=", (Decimal("12.50"),))),
        ("note = 'it''s'", Compare(("note",), "=", ("it's",))),
        ("b = X'0aff'", Compare(("b",), "=", (b"\n\xff",))),
        ('"Odd ""name""" = TRUE', Compare(('Odd "name"',), "=", (True,))),
        ("`back` IS NOT NULL", IsNull("back", True)),
        ("id NOT IN (1, 2)", InList(("id",), ((1,), (2,)), True)),
        ("(a, b) >= (1, 'x')", Compare(("a", "b"), ">=", (1, "x"))),
        ("(a, b) IN ((1, 'x'), (2, 'y'))", InList(("a", "b"), ((1, "x"), (2, "y")))),
        ("id BETWEEN 1 AND 5", Between("id", 1, 5)),
        ("n not like 'a%'", Like("n", "a%", True)),
        (
            "a = 1 AND NOT (b = 2 OR c IS NULL) AND d = 3",
            And(
                (
                    Compare(("a",), "=", (1,)),
                    Not(Or((Compare(("b",), "=", (2,)), IsNull("c")))),
                    Compare(("d",), "=", (3,)),
                )
            ),
        ),
    ],
)
def test_what_a_condition_can_say(text: str, expected: Condition) -> None:
    assert parse_condition(text) == expected
    assert parse_condition(condition_text(expected)) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("true); DROP TABLE public.victim; SELECT (1", "a semicolon at character 6"),
        (
            'true); COMMIT; ALTER ROLE app SUPERUSER; SELECT "id" FROM ONLY t WHERE (true',
            "a semicolon",
        ),
        ("id <= 3 AND pg_sleep(5)::text = ''", "a cast (::)"),
        ("id <= 3 AND pg_sleep(5) IS NULL", "'pg_sleep' (character 13) calls a function"),
        ("id <= 3 AND SLEEP(5) = 0", "'SLEEP' (character 13) calls a function"),
        ("id = now()", "'now' (character 6) calls a function"),
        ("id IN (SELECT id FROM t)", "starts a statement or a subquery"),
        ("EXISTS (SELECT 1)", "calls a function"),
        ("id = 1 -- rest", "a comment"),
        ("id = 1 /* x */", "a comment"),
        ("id = 1 # x", "a comment"),
        ("id = 1 + 1", "'+' at character 8 is not part of a condition"),
        ("id = NULL", "write IS NULL"),
        ("id = 'open", "does not end"),
        ("id = 1e9", "runs into 'e'"),
        ("id = $1", "'$' at character 6"),
        ("", "is empty"),
        ("id = 1 AND", "ends where"),
        ("id = 1 id = 2", "AND, OR or the end"),
        ('"" = 1', "is empty"),
        ("(a, b) = 1", "a row of 2 values"),
        ("(a, b) BETWEEN 1 AND 2", "takes one column"),
        ("(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1), "nests deeper"),
        ("NOT " * (MAX_DEPTH + 1) + "a = 1", "nests deeper"),
        ("a = '" + "x" * MAX_CHARS + "'", "longer than"),
        ("[" * 1024 + "]" * 1024, "'[' at character 1"),
    ],
)
def test_anything_else_is_one_sentence(text: str, fragment: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_condition(text)
    message = str(caught.value)
    assert fragment in message and "\n" not in message


def test_columns_are_checked_against_the_table() -> None:
    cond = parse_condition("ID > 3 AND (\"Note\", v) IN (('x', 1))")
    resolved = resolve(cond, ["id", "Note", "v"], "s.t")
    assert condition_text(resolved) == "id > 3 AND (Note, v) IN (('x', 1))"
    with pytest.raises(FilterError, match=r"s\.t has no column 'nope' \(its columns: id, Note"):
        resolve(parse_condition("nope = 1"), ["id", "Note"], "s.t")
    # Two columns that differ in case only: the name must be exact.
    with pytest.raises(FilterError, match="no column 'ab'"):
        resolve(parse_condition("ab = 1"), ["Ab", "AB"], "s.t")


def test_sql_binds_every_value_and_quotes_every_name() -> None:
    cond = resolve(
        parse_condition("\"we\"\"ird%\" = 'x''); DROP TABLE t; --' OR id BETWEEN 1 AND 2"),
        ['we"ird%', "id"],
        "s.t",
    )
    assert to_sql(cond, "postgres") == (
        '"we""ird%%" = %s OR "id" BETWEEN %s AND %s',
        ["x'); DROP TABLE t; --", 1, 2],
    )
    assert to_sql(cond, "mariadb") == (
        '`we"ird%%` = %s OR `id` BETWEEN %s AND %s',
        ["x'); DROP TABLE t; --", 1, 2],
    )


_TOKENS = st.sampled_from(
    [
        "id", "a", '"q""x"', "`b`", "(", ")", ",", "=", "<>", "!=", "<", "<=", ">", ">=",
        "AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "TRUE", "FALSE",
        "1", "-2", "3.5", "'s'", "'it''s'", "X'0a'", "x'", ";", "--", "/*", "::", "(1",
        "pg_sleep(1)", "SELECT", "'", '"', "`", "[", "]", "{", "}", "\\", "\x00", "é",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), st.lists(_TOKENS, max_size=40).map(" ".join)))
def test_any_text_parses_or_is_refused_with_a_filter_error(text: str) -> None:
    """Random text: a condition (whose text reads back the same) or FilterError, never
    another exception."""
    try:
        cond = parse_condition(text)
    except FilterError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert parse_condition(condition_text(cond)) == cond


_names = st.text(min_size=1, max_size=12).filter(lambda n: "\x00" not in n)
_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.decimals(min_value=-(10**12), max_value=10**12, places=3),
    st.text(max_size=20),
    st.binary(max_size=8),
)


def _row_predicates(width: int) -> st.SearchStrategy[Condition]:
    columns = st.lists(_names, min_size=width, max_size=width).map(tuple)
    row = st.lists(_values, min_size=width, max_size=width).map(tuple)
    return st.one_of(
        st.builds(Compare, columns, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), row),
        st.builds(InList, columns, st.lists(row, min_size=1, max_size=3).map(tuple), st.booleans()),
    )


_predicates = st.one_of(
    _row_predicates(1),
    _row_predicates(2),
    st.builds(Between, _names, _values, _values, st.booleans()),
    st.builds(Like, _names, st.text(max_size=10), st.booleans()),
    st.builds(IsNull, _names, st.booleans()),
)
_conditions = st.recursive(
    _predicates,
    lambda inner: st.one_of(
        st.builds(Not, inner),
        st.lists(inner, min_size=2, max_size=3).map(lambda p: And(tuple(p))),
        st.lists(inner, min_size=2, max_size=3).map(lambda p: Or(tuple(p))),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_conditions)
def test_a_condition_reads_back_from_its_text(cond: Condition) -> None:
    """What a signal and the ledger hold (the text) is the structure that was sent; the
    SQL holds no value, only placeholders (one per value, in order)."""
    assert parse_condition(condition_text(cond)) == cond
    sql, params = to_sql(cond, "postgres")
    assert sql.count("%s") == len(params)
