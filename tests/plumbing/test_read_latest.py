"""read_latest tells a cluster that did not answer from a topic that does not exist."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bizevents.devstack import Endpoints
from bizevents.plumbing.errors import TransientError
from bizevents.plumbing.kafka import read_latest


def test_a_cluster_that_does_not_answer_is_said_so(closed_address: str) -> None:
    with pytest.raises(TransientError, match=f"cluster at {closed_address} did not answer"):
        read_latest({"bootstrap.servers": closed_address}, "anything", "t", timeout_s=2)


def test_a_topic_that_does_not_exist_has_no_keys(
    bizevents_stack: Endpoints, unique_topic: Callable[[str], str]
) -> None:
    kafka = {"bootstrap.servers": bizevents_stack.bootstrap_servers}
    assert read_latest(kafka, unique_topic("absent"), "t", timeout_s=10) == {}
