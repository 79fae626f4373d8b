"""The Kafka node's pure parts."""

from __future__ import annotations

from bizevents.devstack.kafkanode import _new_cluster_id


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """The storage tool reads ``-t -abc...`` as a missing id: one start in 64 failed."""
    ids = [_new_cluster_id() for _ in range(3000)]
    assert all(not i.startswith("-") and len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
