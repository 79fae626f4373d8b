"""Snapshot conditions as data, never as SQL text.

The condition of an incremental snapshot (a signal's ``filter``, ``bizevents capture
snapshot --where``, a ``verify --repair``) is parsed into a small structure, checked
against the table's columns (:func:`resolve`) and rendered with quoted identifiers and
bound parameters (:func:`to_sql`), for PostgreSQL and MariaDB alike. What it can say:

- ``column = value`` (also ``<>``, ``!=``, ``<``, ``<=``, ``>``, ``>=``), and the
  same over a row of columns: ``(a, b) >= (1, 'x')``;
- ``column [NOT] IN (value, ...)``, ``(a, b) [NOT] IN ((1, 'x'), ...)``;
- ``column [NOT] BETWEEN value AND value``, ``column [NOT] LIKE 'pattern'``,
  ``column IS [NOT] NULL``;
- those joined with ``AND``, ``OR``, ``NOT`` and parentheses.

A value is an integer, a decimal (``-12.50``), a string in single quotes (``''`` for a
quote; no backslash escapes), ``X'0aff'`` for bytes, ``TRUE`` or ``FALSE``. A column is
a name, or a name in double quotes or backticks. Nothing else parses: no function, no
subquery, no cast, no comment, no semicolon, no arithmetic. The text's size, its
tokens and its nesting are bounded, so a hostile text costs little to refuse.

Pure: no database, no I/O. :class:`FilterError`'s message is the sentence to show.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

__all__ = [
    "MAX_CHARS",
    "MAX_DEPTH",
    "And",
    "Between",
    "Compare",
    "Condition",
    "FilterError",
    "InList",
    "IsNull",
    "Like",
    "Not",
    "Or",
    "Value",
    "all_of",
    "any_of",
    "condition_text",
    "parse_condition",
    "resolve",
    "to_sql",
]

#: The longest condition text taken (characters).
MAX_CHARS: Final = 65_536
#: The most tokens a condition may hold.
MAX_TOKENS: Final = 20_000
#: The deepest nesting of parentheses and NOTs.
MAX_DEPTH: Final = 32
#: The longest number and the longest column name.
_MAX_NUMBER: Final = 100
_MAX_NAME: Final = 128

Value = bool | int | Decimal | str | bytes

_COMPARISONS: Final = frozenset(("=", "<>", "<", "<=", ">", ">="))
_KEYWORDS: Final = frozenset(
    ("AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "TRUE", "FALSE")
)
#: Words that start a statement or a subquery: named as such when they appear.
_STATEMENTS: Final = frozenset(
    (
        "SELECT", "WITH", "UNION", "INSERT", "UPDATE", "DELETE", "DROP", "ALTER", "CREATE",
        "GRANT", "REVOKE", "COMMIT", "ROLLBACK", "BEGIN", "SET", "COPY", "CALL", "DO",
        "EXECUTE", "TRUNCATE", "VALUES", "EXISTS", "CASE", "CAST", "INTO", "FROM", "WHERE",
    )
)  # fmt: skip
_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_NUMBER: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?", re.ASCII)
_HEX: Final = re.compile(r"[0-9A-Fa-f]*")


class FilterError(ValueError):
    """A condition that is not one a snapshot takes; its message is one sentence."""


@dataclass(frozen=True, slots=True)
class Compare:
    """``column op value``, or a row of columns against a row of values."""

    columns: tuple[str, ...]
    op: str
    values: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class InList:
    """``column IN (values)``, or a row of columns ``IN`` rows of values."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Between:
    column: str
    low: Value
    high: Value
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    column: str
    pattern: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    column: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Not:
    inner: Condition


@dataclass(frozen=True, slots=True)
class And:
    """Every part holds (two or more parts)."""

    parts: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """One part holds at least (two or more parts)."""

    parts: tuple[Condition, ...]


Condition = Compare | InList | Between | Like | IsNull | Not | And | Or


def all_of(parts: Sequence[Condition]) -> Condition:
    """Every one of ``parts`` (one part: itself)."""
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def any_of(parts: Sequence[Condition]) -> Condition:
    """At least one of ``parts`` (one part: itself)."""
    return parts[0] if len(parts) == 1 else Or(tuple(parts))


# -- reading ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    #: ``name`` (a bare word), ``quoted`` (a quoted name), ``string``, ``number``,
    #: ``bytes``, ``op``, or the punctuation itself: ``(``, ``)``, ``,``.
    kind: str
    text: str
    at: int  # 1-based character position, for the sentence

    def shown(self) -> str:
        text = self.text if len(self.text) <= 40 else self.text[:40] + "..."
        return f"{text!r} (character {self.at})"


def _refuse_at(text: str, i: int) -> FilterError:
    """The sentence for a character no token starts with."""
    two = text[i : i + 2]
    where = f"character {i + 1}"
    if text[i] == ";":
        return FilterError(f"a semicolon at {where}: a condition is one expression, not statements")
    if two in ("--", "/*") or text[i] == "#":
        return FilterError(f"a comment at {where}: comments are not allowed")
    if two == "::":
        return FilterError(f"a cast (::) at {where}: casts are not allowed")
    return FilterError(f"{text[i]!r} at {where} is not part of a condition")


def _quoted_end(text: str, i: int, quote: str) -> int:
    """The index after the quoted token starting at ``i`` (a doubled quote stays in)."""
    j = i + 1
    while True:
        k = text.find(quote, j)
        if k < 0:
            return -1
        if text.startswith(quote * 2, k):
            j = k + 2
            continue
        return k + 1


def _tokens(text: str) -> Iterator[_Token]:
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c in "(),":
            yield _Token(c, c, i + 1)
            i += 1
            continue
        if c in "'\"`":
            end = _quoted_end(text, i, c)
            if end < 0:
                what = "string" if c == "'" else "quoted name"
                raise FilterError(f"the {what} starting at character {i + 1} does not end")
            body = text[i + 1 : end - 1].replace(c * 2, c)
            yield _Token("string" if c == "'" else "quoted", body, i + 1)
            i = end
            continue
        if c in "xX" and text.startswith("'", i + 1):
            end = _quoted_end(text, i + 1, "'")
            body = text[i + 2 : end - 1] if end > 0 else ""
            if end < 0 or not _HEX.fullmatch(body) or len(body) % 2:
                raise FilterError(
                    f"the bytes at character {i + 1} are not X'...' with pairs of hex digits"
                )
            yield _Token("bytes", body, i + 1)
            i = end
            continue
        if c.isascii() and (c.isalpha() or c == "_"):
            m = _PLAIN_NAME.match(text, i)
            assert m is not None
            yield _Token("name", m.group(), i + 1)
            i = m.end()
            continue
        m = _NUMBER.match(text, i)
        if m is not None:
            if len(m.group()) > _MAX_NUMBER:
                raise FilterError(
                    f"the number at character {i + 1} is longer than {_MAX_NUMBER} characters"
                )
            after = text[m.end() : m.end() + 1]
            if after and (after.isalnum() or after in "._"):
                raise FilterError(
                    f"the number at character {i + 1} runs into {after!r}: a number is digits, "
                    "with a '.' and digits for a decimal"
                )
            yield _Token("number", m.group(), i + 1)
            i = m.end()
            continue
        if c in "<>=!":
            two = text[i : i + 2]
            op = two if two in ("<>", "<=", ">=", "!=") else c
            if op == "!":
                raise _refuse_at(text, i)
            yield _Token("op", "<>" if op == "!=" else op, i + 1)
            i += len(op)
            continue
        raise _refuse_at(text, i)


class _Parser:
    def __init__(self, text: str) -> None:
        tokens: list[_Token] = []
        for token in _tokens(text):
            tokens.append(token)
            if len(tokens) > MAX_TOKENS:
                raise FilterError(f"the condition has more than {MAX_TOKENS} tokens")
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> _Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def peek_is(self, kind: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == kind

    def next(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise FilterError(f"the condition ends where {what} should follow")
        self.i += 1
        return token

    def at(self, kind: str) -> bool:
        """Whether the next token is of ``kind`` (taken if so)."""
        token = self.peek()
        if token is not None and token.kind == kind:
            self.i += 1
            return True
        return False

    def keyword(self, word: str) -> bool:
        """Whether the next token is ``word`` (taken if so)."""
        token = self.peek()
        if token is not None and token.kind == "name" and token.text.upper() == word:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, what: str) -> _Token:
        token = self.next(what)
        if token.kind != kind:
            raise self.unexpected(token, what)
        return token

    def unexpected(self, token: _Token, what: str) -> FilterError:
        word = token.text.upper() if token.kind == "name" else ""
        if token.kind == "name" and self.peek_is("("):
            return FilterError(
                f"{token.shown()} calls a function: functions are not allowed in a condition"
            )
        if word in _STATEMENTS:
            return FilterError(
                f"{token.shown()} starts a statement or a subquery: a condition is a "
                "comparison of columns with values"
            )
        if word == "NULL":
            return FilterError(
                f"NULL at character {token.at} compares to nothing: write IS NULL or IS NOT NULL"
            )
        return FilterError(f"{what} was expected where {token.shown()} is")

    def condition(self) -> Condition:
        if not self.tokens:
            raise FilterError("the condition is empty")
        cond = self.any(0)
        extra = self.peek()
        if extra is not None:
            self.i += 1
            raise self.unexpected(extra, "AND, OR or the end")
        return cond

    def any(self, depth: int) -> Condition:
        parts = [self.all(depth)]
        while self.keyword("OR"):
            parts.append(self.all(depth))
        return any_of(parts)

    def all(self, depth: int) -> Condition:
        parts = [self.negation(depth)]
        while self.keyword("AND"):
            parts.append(self.negation(depth))
        return all_of(parts)

    def deeper(self, depth: int) -> int:
        if depth >= MAX_DEPTH:
            raise FilterError(f"the condition nests deeper than {MAX_DEPTH} levels")
        return depth + 1

    def negation(self, depth: int) -> Condition:
        if self.keyword("NOT"):
            return Not(self.negation(self.deeper(depth)))
        return self.primary(depth)

    def primary(self, depth: int) -> Condition:
        token = self.peek()
        if token is not None and token.kind == "(":
            after, comma = self.peek(1), self.peek(2)
            is_row = (
                after is not None
                and after.kind in ("name", "quoted")
                and comma is not None
                and comma.kind == ","
            )
            if not is_row:
                self.i += 1
                inner = self.any(self.deeper(depth))
                self.expect(")", "')'")
                return inner
            self.i += 1
            columns = [self.column()]
            while self.at(","):
                columns.append(self.column())
            self.expect(")", "',' or ')' after the row's columns")
            return self.predicate(tuple(columns))
        return self.predicate((self.column(),))

    def column(self) -> str:
        token = self.next("a column")
        if token.kind == "quoted":
            if not token.text:
                raise FilterError(f"the quoted name at character {token.at} is empty")
        elif token.kind != "name" or token.text.upper() in _KEYWORDS or self.peek_is("("):
            raise self.unexpected(token, "a column")
        if len(token.text) > _MAX_NAME:
            raise FilterError(
                f"the column name at character {token.at} is longer than {_MAX_NAME} characters"
            )
        return token.text

    def predicate(self, columns: tuple[str, ...]) -> Condition:
        token = self.next(f"a comparison after {columns[-1]!r}")
        if token.kind == "op":
            return Compare(columns, token.text, self.row(len(columns)))
        word = token.text.upper() if token.kind == "name" else ""
        if word == "IS":
            negated = self.keyword("NOT")
            if not self.keyword("NULL"):
                raise self.unexpected(self.next("NULL"), "NULL")
            return IsNull(self._one(columns, "IS NULL"), negated)
        negated = word == "NOT"
        if negated:
            token = self.next("IN, BETWEEN or LIKE after NOT")
            word = token.text.upper() if token.kind == "name" else ""
        if word == "IN":
            self.expect("(", "'(' after IN")
            rows = [self.row(len(columns))]
            while self.at(","):
                rows.append(self.row(len(columns)))
            self.expect(")", "',' or ')' in the IN list")
            return InList(columns, tuple(rows), negated)
        if word == "BETWEEN":
            column = self._one(columns, "BETWEEN")
            low = self.value()
            if not self.keyword("AND"):
                raise self.unexpected(self.next("AND"), "AND of BETWEEN")
            return Between(column, low, self.value(), negated)
        if word == "LIKE":
            column = self._one(columns, "LIKE")
            pattern = self.next("a pattern")
            if pattern.kind != "string":
                raise self.unexpected(pattern, "a string pattern")
            return Like(column, pattern.text, negated)
        raise self.unexpected(token, "a comparison (=, <>, <, <=, >, >=, IN, ...)")

    def _one(self, columns: tuple[str, ...], what: str) -> str:
        if len(columns) != 1:
            raise FilterError(f"{what} takes one column, not a row of {len(columns)}")
        return columns[0]

    def row(self, width: int) -> tuple[Value, ...]:
        """One value, or ``width`` values in parentheses."""
        if width == 1:
            return (self.value(),)
        self.expect("(", f"a row of {width} values in parentheses")
        values = [self.value()]
        while len(values) < width:
            self.expect(",", f"a row of {width} values")
            values.append(self.value())
        self.expect(")", f"')' after a row of {width} values")
        return tuple(values)

    def value(self) -> Value:
        token = self.next("a value")
        if token.kind == "string":
            return token.text
        if token.kind == "bytes":
            return bytes.fromhex(token.text)
        if token.kind == "number":
            return Decimal(token.text) if "." in token.text else int(token.text)
        word = token.text.upper() if token.kind == "name" else ""
        if word in ("TRUE", "FALSE"):
            return word == "TRUE"
        raise self.unexpected(token, "a value (a number, a 'string', X'hex', TRUE or FALSE)")


def parse_condition(text: str) -> Condition:
    """The condition ``text`` says, or :class:`FilterError` with the reason."""
    if len(text) > MAX_CHARS:
        raise FilterError(f"the condition is longer than {MAX_CHARS} characters")
    return _Parser(text).condition()


# -- writing ----------------------------------------------------------------------------


def _name(name: str) -> str:
    if _PLAIN_NAME.fullmatch(name) and name.upper() not in _KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise FilterError(f"{value} is not a number a condition can hold")
        return format(value, "f")
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    return "'" + value.replace("'", "''") + "'"


def _columns(columns: tuple[str, ...], name: Callable[[str], str]) -> str:
    if len(columns) == 1:
        return name(columns[0])
    return "(" + ", ".join(name(c) for c in columns) + ")"


def _row(values: tuple[Value, ...], value: Callable[[Value], str]) -> str:
    if len(values) == 1:
        return value(values[0])
    return "(" + ", ".join(value(v) for v in values) + ")"


def _write(cond: Condition, name: Callable[[str], str], value: Callable[[Value], str]) -> str:
    """The condition with columns and values as ``name`` and ``value`` write them; every
    compound part in parentheses (its structure reads back the same)."""

    def part(c: Condition) -> str:
        text = _write(c, name, value)
        return f"({text})" if isinstance(c, (And, Or, Not)) else text

    if isinstance(cond, Compare):
        return f"{_columns(cond.columns, name)} {cond.op} {_row(cond.values, value)}"
    if isinstance(cond, InList):
        rows = ", ".join(_row(r, value) for r in cond.rows)
        negated = "NOT " if cond.negated else ""
        return f"{_columns(cond.columns, name)} {negated}IN ({rows})"
    if isinstance(cond, Between):
        negated = "NOT " if cond.negated else ""
        low, high = value(cond.low), value(cond.high)
        return f"{name(cond.column)} {negated}BETWEEN {low} AND {high}"
    if isinstance(cond, Like):
        negated = "NOT " if cond.negated else ""
        return f"{name(cond.column)} {negated}LIKE {value(cond.pattern)}"
    if isinstance(cond, IsNull):
        return f"{name(cond.column)} IS {'NOT ' if cond.negated else ''}NULL"
    if isinstance(cond, Not):
        return f"NOT ({_write(cond.inner, name, value)})"
    joiner = " AND " if isinstance(cond, And) else " OR "
    return joiner.join(part(p) for p in cond.parts)


def condition_text(cond: Condition) -> str:
    """The condition as text :func:`parse_condition` reads back into the same structure
    (what a signal and the snapshot ledger hold)."""
    return _write(cond, _name, _literal)


def to_sql(cond: Condition, dialect: Literal["postgres", "mariadb"]) -> tuple[str, list[Value]]:
    """``(SQL, parameters)``: the condition with quoted identifiers and a ``%s``
    placeholder per value, as psycopg2 and PyMySQL bind them (a ``%`` of a name is
    doubled: the drivers format the text). Names should be :func:`resolve`'d first."""
    params: list[Value] = []
    quote = '"' if dialect == "postgres" else "`"

    def name(n: str) -> str:
        return quote + n.replace(quote, quote * 2).replace("%", "%%") + quote

    def value(v: Value) -> str:
        params.append(v)
        return "%s"

    return _write(cond, name, value), params


def resolve(cond: Condition, columns: Sequence[str], table: str) -> Condition:
    """The condition with each column as the table names it: the same name, else the one
    column whose name differs in case only; :class:`FilterError` for any other name."""
    exact = set(columns)
    folded: dict[str, list[str]] = {}
    for c in columns:
        folded.setdefault(c.casefold(), []).append(c)

    def one(n: str) -> str:
        if n in exact:
            return n
        found = folded.get(n.casefold(), [])
        if len(found) == 1:
            return found[0]
        shown = ", ".join(list(columns)[:20]) + (", ..." if len(columns) > 20 else "")
        named = n if len(n) <= 40 else n[:40] + "..."
        raise FilterError(f"{table} has no column {named!r} (its columns: {shown})")

    def walk(c: Condition) -> Condition:
        if isinstance(c, Compare):
            return Compare(tuple(one(n) for n in c.columns), c.op, c.values)
        if isinstance(c, InList):
            return InList(tuple(one(n) for n in c.columns), c.rows, c.negated)
        if isinstance(c, Between):
            return Between(one(c.column), c.low, c.high, c.negated)
        if isinstance(c, Like):
            return Like(one(c.column), c.pattern, c.negated)
        if isinstance(c, IsNull):
            return IsNull(one(c.column), c.negated)
        if isinstance(c, Not):
            return Not(walk(c.inner))
        return type(c)(tuple(walk(p) for p in c.parts))

    return walk(cond)
