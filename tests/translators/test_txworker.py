"""The transaction worker's member without a broker: its share follows the group's
assignment, a revocation records the checkpoint of a share in hand (none while a rebuild
is under way), and each owned virtual partition's checkpoint goes to the state topic."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bizevents_store.translators import orders_v3

from bizevents.contracts.serde import BusinessSerializer
from bizevents.translators.assembly import Assembler
from bizevents.translators.settings import RuntimeSettings, TransactionSettings
from bizevents.translators.txcheckpoint import POINT, Point, Progress
from bizevents.translators.txproducer import send_routed
from bizevents.translators.txworker import TxWorker
from tests.translators.txharness import SOURCES, make_plan

N = 4


@pytest.fixture
def member(serializer: BusinessSerializer) -> TxWorker:
    worker = TxWorker(
        RuntimeSettings(), TransactionSettings(), make_plan([orders_v3], serializer, N)
    )
    checkpoints: list[Any] = []

    async def checkpoint(producer: Any) -> None:
        checkpoints.append(producer)

    worker._checkpoint = checkpoint  # type: ignore[method-assign]
    worker.checkpoints = checkpoints  # type: ignore[attr-defined]
    worker._producer = ByPartition()  # type: ignore[assignment]
    return worker


class ByPartition:
    """The member's producers as it asks for them: one per owned virtual partition."""

    def of(self, v: int) -> str:
        return f"producer {v}"


def test_an_assignment_is_owned_and_asks_for_a_rebuild(member: TxWorker) -> None:
    asyncio.run(member._assigned([("tx.assemble", 1), ("tx.assemble", 3)]))
    assert member.owned == frozenset({1, 3}) and member._changed
    assert not member._revoking


def test_a_revocation_records_the_checkpoint_of_the_share_in_hand(member: TxWorker) -> None:
    member.share.owned = frozenset({0, 2})
    member.assembler = Assembler(member.plan.core.reads)
    member._changed = False
    asyncio.run(member._revoked([("tx.assemble", 0), ("tx.assemble", 2)]))
    assert member.checkpoints == [member._producer]  # type: ignore[attr-defined]
    assert member.owned == frozenset() and member._revoking


def test_a_revocation_during_a_rebuild_records_nothing(member: TxWorker) -> None:
    member.share.owned = frozenset({0, 2})
    member.assembler = Assembler(member.plan.core.reads)
    member._rebuilding = True
    asyncio.run(member._revoked([("tx.assemble", 0)]))
    assert member.checkpoints == []  # type: ignore[attr-defined]
    assert member.owned == frozenset()


def test_each_owned_partition_gets_the_same_checkpoint_in_the_state_topic(
    member: TxWorker,
) -> None:
    member.share.owned = frozenset({3, 1})
    member.share.points = {3: Point(), 1: Point()}  # as the rebuild read them
    member.assembler = Assembler(member.plan.core.reads)
    member._read = Progress({tp: 40 for tp in SOURCES})
    member._unrecorded = True  # a batch was handled since the last checkpoint
    routed = member._checkpoints()
    # each partition's checkpoint goes with its own producer (its own transaction)
    assert [producer for producer, _ in routed] == ["producer 1", "producer 3"]
    sends = [send for _, items in routed for send in items]
    assert [(topic, key) for topic, _, key, _, _ in sends] == [
        ("tx.state", POINT + b"1"),
        ("tx.state", POINT + b"3"),
    ]
    point = Point.decode(sends[0][3] or b"")
    assert point == Point.decode(sends[1][3] or b"")
    assert point.offsets == {tp: 40 for tp in SOURCES}
    assert not member._unrecorded


class _OutOfTransaction:
    """A transactional producer whose transaction the broker aborted: aiokafka refuses
    the send with ``IllegalOperation``, as its ``send_batch`` does then."""

    def create_batch(self) -> Any:
        return type("Batch", (), {"append": lambda self, **_: object()})()

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        from aiokafka.errors import IllegalOperation

        raise IllegalOperation("Can't send messages while not in transaction")


def test_a_send_refused_out_of_transaction_reads_again_from_the_checkpoints() -> None:
    """Exactly once, a member held up past its transaction's timeout found the broker had
    aborted it, and aiokafka refused the next send with an error that is not a
    KafkaError: the member exited with a traceback. It is now the transient error the
    loop answers by reading again from the checkpoints under new producers."""
    from bizevents.plumbing.errors import TransientError

    send = ("orders", 0, b"k", b"v", [])
    with pytest.raises(TransientError, match="a partition's transaction is gone"):
        asyncio.run(send_routed([(_OutOfTransaction(), [send])]))
