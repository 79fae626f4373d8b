"""A minimal Faust app for the integration test: uppercase each value from one topic to another.

Run as ``python -m faust -A tests.integration.faust_passthrough worker``; the test
passes the broker and topic names in the environment.
"""

from __future__ import annotations

import os

import faust

app = faust.App(
    os.environ["FAUST_TEST_APP_ID"],
    broker=f"kafka://{os.environ['FAUST_TEST_BROKER']}",
    store="memory://",
    topic_partitions=1,
    topic_replication_factor=1,
    topic_disable_leader=True,
    consumer_auto_offset_reset="earliest",
    web_enabled=False,
    # The embedded broker holds a JoinGroup for half the session timeout: Faust's
    # default of 60 s means a 30 s join; 6 s gives ~3 s (docs/broker.md).
    broker_session_timeout=6,
    broker_heartbeat_interval=1,
)
source = app.topic(os.environ["FAUST_TEST_SOURCE"], key_serializer="raw", value_serializer="raw")
sink = app.topic(os.environ["FAUST_TEST_SINK"], key_serializer="raw", value_serializer="raw")


@app.agent(source)
async def upper(stream: faust.StreamT[bytes]) -> None:
    async for key, value in stream.items():
        await sink.send(key=key, value=value.upper())
