"""The one start-up of both workers (:mod:`bizevents.translators.startup`): its sentences.
The start-up itself runs against a broker in tests/integration (test_translate_worker,
test_transaction_worker)."""

from __future__ import annotations

from bizevents.translators.startup import missing_topics


def test_a_missing_topic_is_named_with_what_to_check() -> None:
    one = missing_topics("technical topic", ["s.store.orders"], "host:1", "check the prefix")
    assert str(one) == (
        "the technical topic s.store.orders does not exist on host:1: check the prefix"
    )
    two = missing_topics("topic", ["a", "b"], "host:1", "start the capture")
    assert str(two) == "the topics a, b do not exist on host:1: start the capture"
