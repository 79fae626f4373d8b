"""Transaction translators: declarations checked where written, one transaction's events
with the changes they stem from, and a plugin's failures as one reason."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from bizevents.contracts.business import BusinessEvent
from bizevents.testing import change
from bizevents.translators.exceptions import PluginError, TranslationError
from bizevents.translators.transaction_api import (
    Attributed,
    TransactionChanges,
    TransactionTranslator,
    is_transactional,
    stems_from,
    transaction_translator,
)
from tests.translators.sample import ThingCreated, ThingRenamed, things_v1

CREATED = change("public.things", "c", after={"id": 1, "label": "a"}, txid=7)
NOTE = change("public.notes", "c", after={"id": 9, "text": "x"}, txid=7)
TX = TransactionChanges("7", (CREATED, NOTE))


def declare(func: Callable[[TransactionChanges], object]) -> TransactionTranslator:
    return transaction_translator(
        name="things-tx", version=1, sources=["public.things"], emits=[ThingCreated]
    )(func)  # type: ignore[arg-type]


@transaction_translator(
    name="things-tx",
    version=1,
    sources=["public.things", "public.notes"],
    emits=[ThingCreated],
    keys={"public.things": "id", "public.note*": ("thing_id", "n")},
)
def things_tx(tx: TransactionChanges) -> Iterable[BusinessEvent | Attributed]:
    for c in tx.of("public.things"):
        yield stems_from(c, ThingCreated(thing_id=c.new("id"), label=c.new("label")))
    yield ThingCreated(thing_id=0, label=f"{len(tx)} changes")


def test_events_come_with_the_change_they_stem_from_or_none() -> None:
    first, second = things_tx.attributed(TX)
    assert first.change is CREATED and first.event == ThingCreated(thing_id=1, label="a")
    assert second.change is None and second.event == ThingCreated(thing_id=0, label="2 changes")
    assert things_tx.translate_transaction(TX) == (first.event, second.event)


def test_keys_by_table_or_pattern_and_the_row_key_otherwise() -> None:
    assert things_tx.key_columns("public.things") == ("id",)
    assert things_tx.key_columns("public.notes") == ("thing_id", "n")
    assert things_tx.key_columns("public.other") == ()
    assert is_transactional(things_tx) and not is_transactional(things_v1)


def test_a_transaction_translator_refuses_one_change_at_a_time() -> None:
    with pytest.raises(TranslationError, match="is a transaction translator"):
        things_tx.translate(CREATED)


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({"things": "id"}, "keys names 'things', which is not a schema.table"),
        ({"public.things": ()}, "keys of public.things must be one or more column names"),
        ({"public.things": ["id", ""]}, "keys of public.things must be one or more column"),
    ],
)
def test_a_malformed_keys_declaration_fails_where_written(
    keys: dict[str, str | list[str]], problem: str
) -> None:
    with pytest.raises(PluginError, match=rf"translator things-tx@1 \(.*\): {problem}"):
        transaction_translator(
            name="things-tx", version=1, sources=["public.things"], emits=[ThingCreated], keys=keys
        )(lambda tx: ())


def _undeclared(tx: TransactionChanges) -> object:
    return ThingRenamed(thing_id=1, old_label="a", new_label="b")


def _foreign(tx: TransactionChanges) -> object:
    other = change("public.things", "c", after={"id": 2, "label": "b"})
    return stems_from(other, ThingCreated(thing_id=2, label="b"))


def _broken(tx: TransactionChanges) -> object:
    return {"present": 1}["missing"]


@pytest.mark.parametrize(
    ("func", "reason"),
    [
        (_undeclared, "returned ThingRenamed, which it does not declare in emits"),
        (_foreign, "said its ThingCreated stems from .* which is not a change of the"),
        (_broken, "KeyError"),
    ],
    ids=["undeclared", "foreign-change", "plugin-bug"],
)
def test_what_a_plugin_gets_wrong_is_a_translation_error(
    func: Callable[[TransactionChanges], object], reason: str
) -> None:
    with pytest.raises(TranslationError, match=reason) as caught:
        declare(func).attributed(TX)
    assert "things-tx@1" in str(caught.value)


def test_nothing_returned_is_no_event() -> None:
    assert declare(lambda tx: None).attributed(TX) == ()
