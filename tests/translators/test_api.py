"""The plugin API: declarations checked where written, translation outcomes, policies."""

from __future__ import annotations

from typing import Any

import pytest

from bizevents import TranslationError, translator
from bizevents.contracts.change import Change
from bizevents.contracts.exceptions import Coordinates
from bizevents.plugins import PluginError
from tests.envelopes import Row, keyed_event, pg_source
from tests.translators.sample import ThingCreated, ThingRenamed, things_v1, things_v2


def change(op: str, before: Row, after: Row, snapshot: str = "false", offset: int = 7) -> Change:
    source = pg_source("things", name="shop", lsn=1000 + offset, tx_id=5, snapshot=snapshot)
    return Change(
        keyed_event(op, before, after, source, Coordinates("shop.public.things", 0, offset))
    )


def test_insert_yields_one_event() -> None:
    events = things_v1(change("c", None, {"id": 1, "label": "a"}))
    assert events == (ThingCreated(thing_id=1, label="a"),)


def test_irrelevant_update_yields_nothing() -> None:
    """A change no business cares about (label untouched) gives zero events."""
    before = {"id": 1, "label": "a", "updated_at": 1}
    after = {"id": 1, "label": "a", "updated_at": 2}
    assert things_v1(change("u", before, after)) == ()


def test_rename_yields_renamed() -> None:
    events = things_v1(change("u", {"id": 1, "label": "a"}, {"id": 1, "label": "b"}))
    assert events == (ThingRenamed(thing_id=1, old_label="a", new_label="b"),)


def test_snapshot_policy_skip() -> None:
    read = change("r", None, {"id": 1, "label": "a"}, snapshot="true")
    assert things_v1(read) == (ThingCreated(thing_id=1, label="a"),)
    assert things_v2(read) == ()


def test_translator_exception_becomes_translation_error() -> None:
    """A bug in a plugin is a TranslationError naming the translator and the record."""
    with pytest.raises(
        TranslationError, match=r"things@1 failed on shop.public.things\[0\]@7: KeyError"
    ):
        things_v1(change("c", None, {"id": 1}))


def test_undeclared_contract_is_refused() -> None:
    @translator(name="sneaky", version=1, sources=["public.things"], emits=[ThingRenamed])
    def sneaky(c: Change) -> ThingCreated:
        return ThingCreated(thing_id=1, label="x")

    with pytest.raises(TranslationError, match="returned ThingCreated, which it does not declare"):
        sneaky(change("c", None, {"id": 1, "label": "a"}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Orders"}, "name 'Orders'"),
        ({"version": 0}, "version 0"),
        ({"version": "2"}, "version '2'"),
        ({"sources": "public.things"}, "sources"),
        ({"sources": ["things"]}, "schema.table"),
        ({"emits": []}, "emits names no contract"),
        ({"emits": [dict]}, "not a BusinessEvent contract"),
        ({"snapshots": "maybe"}, "snapshots='maybe'"),
    ],
    ids=[
        "upper-case-name",
        "version-zero",
        "version-string",
        "sources-string",
        "source-without-schema",
        "no-contracts",
        "not-a-contract",
        "bad-policy",
    ],
)
def test_malformed_declaration_fails_where_written(kwargs: dict[str, Any], message: str) -> None:
    declaration = {
        "name": "things",
        "version": 1,
        "sources": ["public.things"],
        "emits": [ThingCreated],
        **kwargs,
    }
    with pytest.raises(PluginError, match=message):
        translator(**declaration)(lambda c: None)


def test_sources_match_with_wildcards() -> None:
    @translator(name="w", version=1, sources=["public.order*"], emits=[ThingCreated])
    def w(c: Change) -> None:
        return None

    assert w.reads("public.orders") and w.reads("public.order_items")
    assert not w.reads("public.customers")


def test_the_face_exports_exactly_what_a_plugin_needs() -> None:
    """``bizevents.__all__`` is at most 15 names, each resolves, and no module of the store
    plugin imports anything of ours but the face and the transactions module."""
    import ast
    from pathlib import Path

    import bizevents

    assert len(bizevents.__all__) <= 15
    assert all(hasattr(bizevents, name) for name in bizevents.__all__)
    assert {"translator", "Change", "BusinessEvent", "SKIP", "TRANSLATE", "UNAVAILABLE"} <= set(
        bizevents.__all__
    )
    assert "Registry" not in bizevents.__all__ and "discover" not in bizevents.__all__
    store = Path(__file__).parents[2] / "examples" / "store" / "src" / "bizevents_store"
    modules = sorted(store.glob("*.py"))
    assert {"contracts.py", "translators.py"} <= {module.name for module in modules}
    for module in modules:
        tree = ast.parse(module.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
        }
        ours = {
            m for m in imported if m and m.split(".")[0] in ("bizevents", "dataclasses_avroschema")
        }
        assert ours <= {"bizevents", "bizevents.transactions"}, (module.name, ours)


def test_an_unknown_name_of_the_face_is_an_attribute_error() -> None:
    """A name outside the face fails as any missing attribute does."""
    import bizevents

    with pytest.raises(AttributeError, match="Registry"):
        _ = bizevents.Registry


def test_a_floor_imported_alone_does_not_load_the_plugin_api() -> None:
    """The face loads on first use: capture or a Spark executor does not pay for it."""
    import subprocess
    import sys

    probe = (
        "import sys, bizevents.plumbing.errors, bizevents.contracts.binary\n"
        "assert 'bizevents.translators.api' not in sys.modules, sorted(sys.modules)\n"
        "from bizevents import translator\n"
        "assert 'bizevents.translators.api' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
