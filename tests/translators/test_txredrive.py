"""Re-drives carried out by the transaction worker (:mod:`bizevents.translators.txredrive`):
the tools a worker lends them. A re-drive against a broker runs in
tests/integration/test_transaction_parking.py."""

from __future__ import annotations

from collections.abc import Sequence

from bizevents_store.translators import orders_v3

from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.records import OutRecord, Result
from bizevents.translators.txredrive import RedriveTools
from tests.translators.test_txshadow import total_off
from tests.translators.txharness import make_plan


def test_the_tools_of_a_plan_translate_with_the_requested_version_alone(
    serializer: BusinessSerializer,
) -> None:
    plan = make_plan([orders_v3], serializer, 4, versions=[total_off])

    async def send(records: Sequence[OutRecord]) -> None:
        pass

    counted: list[Result] = []
    tools = RedriveTools.of(plan, send, counted.append, lambda: False)
    assert tools.load("orders", 13) is total_off  # installed here: not looked up again
    core = tools.core_of(total_off)
    assert [t.ref for t in core.translators] == ["orders@13"]
    assert core.parking is None and core.dead_letter_topic == plan.core.dead_letter_topic
    assert tools.dead_letter_partitions == plan.partitions["dlq"] == 3
    assert tools.send is send and not tools.revoked()
