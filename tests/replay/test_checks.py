"""A replay's checks before any task runs, against a fake registry client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bizevents.replay import checks
from bizevents.replay.exceptions import RegistryUnreachableError, ReplayConfigError
from tests.translators.sample import things_v1


@dataclass
class Registry:
    refuse: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)

    def get_subjects(self) -> list[str]:
        if self.refuse:
            raise ConnectionError("refused")
        return []

    def register_schema(self, subject: str, schema: Any) -> int:
        return self._call("register", subject)

    def lookup_schema(self, subject: str, schema: Any) -> int:
        return self._call("lookup", subject)

    def _call(self, how: str, subject: str) -> int:
        if self.refuse:
            raise LookupError("Subject not found")
        self.calls.append((how, subject))
        return 1


def test_a_registry_that_does_not_answer_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checks, "registry_client", lambda conf: Registry(refuse=True))
    with pytest.raises(RegistryUnreachableError, match=r"at http://sr cannot be reached"):
        checks.check_registry({}, "http://sr")


@pytest.mark.parametrize(("auto_register", "how"), [(True, "register"), (False, "lookup")])
def test_each_contract_is_registered_or_found_under_its_subject(
    auto_register: bool, how: str
) -> None:
    client = Registry()
    checks.check_contracts(client, [things_v1], "record", auto_register)
    assert client.calls == [
        (how, "test.things.ThingCreated"),
        (how, "test.things.ThingRenamed"),
    ]


def test_a_contract_the_registry_refuses_names_the_translator_and_subject() -> None:
    with pytest.raises(
        ReplayConfigError,
        match=r"contract test.things.ThingCreated of things@1 cannot be used under subject "
        r"test.thing-created-value: Subject not found",
    ):
        checks.check_contracts(Registry(refuse=True), [things_v1], "topic", False)
