"""The demo's names and knobs: the server, slot and tables, the live pins, the story's plan."""

from __future__ import annotations

from dataclasses import dataclass

SERVER = "demo"
SLOT = "bizevents_demo"
TABLES = ("store.customers", "store.products", "store.orders", "store.order_items")
#: The live flow's pins. orders@3 reads whole transactions (orders with their items):
#: it runs under ``bizevents translate --transactions`` beside the row worker
#: (docs/transactions.md).
PINS = {"customers": 1, "orders": 3, "products": 1}
DEAD_LETTER_TOPIC = "bizevents.dead-letter"
TRANSACTION_TOPIC = f"{SERVER}.transaction"
#: The demo's worker is the only member of its group on a loopback broker that holds
#: every JoinGroup in 1 s rounds until half the session has passed (docs/broker.md): at
#: least one round for any session, 3 with the default 6 s, 1 with 2 s. The join, from
#: the consumer's start to "partitions assigned", takes 1.0 s with 2 s (plus Faust's
#: table-manager pause of 1 s before the worker stopped it, bizevents.translators._faust).
DEMO_GROUP = {
    "BIZEVENTS_TRANSLATE__SESSION_TIMEOUT_S": "2",
    "BIZEVENTS_TRANSLATE__HEARTBEAT_INTERVAL_S": "0.5",
    "BIZEVENTS_TRANSLATE__REBALANCE_TIMEOUT_S": "2",
}


@dataclass(frozen=True, slots=True)
class StoryPlan:
    """The story's knobs: which versions, how long the live steps last."""

    buggy: int = 1
    #: orders@3 places each order with its true total (orders@2 fixes the statuses only)
    fixed: int = 3
    step_seconds: float = 15.0
    settle_seconds: float = 30.0
