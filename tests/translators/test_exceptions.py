"""A translation failure as one reason: the runtime's sentence naming the translator and
the record, a plugin's own message alone, and where in the plugin it raised."""

from __future__ import annotations

import sys
import types

from bizevents.contracts.exceptions import Coordinates
from bizevents.translators.exceptions import TranslationError, plugin_failure


def test_the_runtime_names_the_translator_and_where_a_plugin_only_the_reason() -> None:
    named = TranslationError("things@1", "no label", Coordinates("shop.public.things", 2, 40))
    assert str(named).startswith("translator things@1 failed on ")
    assert str(named).endswith(": no label")
    assert "shop.public.things" in str(named)
    own = TranslationError("no such region")
    assert (own.translator, own.reason, str(own)) == ("", "no such region", "no such region")


def test_a_plugin_failure_points_at_the_plugins_own_line() -> None:
    """The innermost line in the plugin's module, not the runtime's call or a library's."""
    module = types.ModuleType("plugin_failing")
    module.__file__ = "/plugins/plugin_failing.py"
    sys.modules["plugin_failing"] = module
    source = (
        "def translate(change):\n    return helper()\n\n\n"
        "def helper():\n    raise ValueError('boom')\n"
    )
    code = compile(source, module.__file__, "exec")
    exec(code, module.__dict__)
    try:
        try:
            module.translate(None)
        except ValueError as exc:
            reason = plugin_failure(module.translate, exc)
    finally:
        del sys.modules["plugin_failing"]
    assert reason == "ValueError: boom (at /plugins/plugin_failing.py:6)"
