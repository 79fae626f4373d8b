"""The dev stack's Kafka node, its pure parts."""

from __future__ import annotations

import base64

from bizevents.devstack.kafkanode import _new_cluster_id


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """The storage tool took an id starting with "-" for an option and refused to format
    (1 stack start in 64 failed so); each id is still 16 bytes in URL-safe base64."""
    made = [_new_cluster_id() for _ in range(2000)]
    assert not [m for m in made if m.startswith("-")]
    assert {len(base64.urlsafe_b64decode(m + "==")) for m in made} == {16}
