"""The parked keys' pure state (:mod:`bizevents.plumbing.parking`): the answer to a
request for a key that is not parked, the same in every re-driver."""

from __future__ import annotations

from bizevents.plumbing.parking import ParkedKeys, Ref

REF: Ref = ("orders", "s.store.orders", 0, b'{"id": 7}')


def test_a_request_for_a_key_not_parked_is_refused_unless_it_unparked_it() -> None:
    parking = ParkedKeys(10)
    assert parking.answer_unparked(REF, "r1") == ("refused", "the key is not parked")
    parking.unparked_by[REF] = "redriven (request r1)"
    assert parking.answer_unparked(REF, "r1") == ("done", "redriven (request r1)")
    assert parking.answer_unparked(REF, "r2") == ("refused", "the key is not parked")
