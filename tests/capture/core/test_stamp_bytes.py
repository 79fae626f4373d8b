"""The transaction stamp's bytes (capture/core/transactions.py) against the plain
writing of them: the envelope's ``ts_ms``, the transaction id, then ``total_order`` and
``data_collection_order`` as Avro longs, whatever the orders stand at."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bizevents.capture.core.transactions import TxBlocks
from bizevents.contracts.binary import VALUE_BRANCH, text, zigzag

# Orders around the looked-up range's end (16,384) and up to a long's.
orders = st.sampled_from([0, 1, 126, 127, 16_382, 16_383, 16_384, 2**31, 2**63 - 2]) | (
    st.integers(min_value=0, max_value=2**63 - 2)
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["public.a", "public.b", "s.c"]), st.none() | st.tuples(orders, orders)
    ),
    min_size=1,
    max_size=40,
)


@given(st.integers(0, 2**63 - 1), st.text(max_size=20), steps)
def test_stamps_are_the_plain_zigzag_bytes(now_ms: int, tx_id: str, plan: list) -> None:
    blocks = TxBlocks(1, 2)
    blocks.start_id(tx_id, 0, now_ms)
    head = VALUE_BRANCH + zigzag(now_ms) + VALUE_BRANCH + text(tx_id)
    total, counts = 0, {}
    for table, jump in plan:
        if jump is not None:  # the orders moved to any place, as a rollback sets them
            total, n = max(jump), min(jump)
            blocks.rollback(table, (total, n))
            counts[table] = n
        total += 1
        counts[table] = counts.get(table, 0) + 1
        assert blocks.stamp(table) == head + zigzag(total) + zigzag(counts[table])
