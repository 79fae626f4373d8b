"""The broker probe (``broker_traits``) against a fake broker that answers ApiVersions v0
as told: which answer gives which traits, what is cached, and a hostile answer's size
bound. The real brokers are in tests/integration/test_broker_contract.py."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bizevents.plumbing import kafka
from bizevents.plumbing.kafka import EMBEDDED_BROKER, FULL_KAFKA, broker_traits


@contextmanager
def fake_broker(answer: bytes | None) -> Iterator[str]:
    """A one-port server: reads one request, sends ``answer`` (None: closes at once)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                if answer is not None:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        kafka._traits.clear()


def api_versions(keys: list[int]) -> bytes:
    body = struct.pack(">ihi", 1, 0, len(keys)) + b"".join(
        struct.pack(">hhh", key, 0, 3) for key in keys
    )
    return struct.pack(">i", len(body)) + body


def test_a_broker_listing_the_group_heartbeat_and_create_partitions_is_kafka() -> None:
    with fake_broker(api_versions([0, 1, 18, 37, 68])) as server:
        assert broker_traits(server) == FULL_KAFKA


def test_a_broker_without_them_is_the_embedded_one() -> None:
    with fake_broker(api_versions([0, 1, 18, 44])) as server:
        assert broker_traits(server) == EMBEDDED_BROKER


def test_no_answer_gives_the_safe_traits_and_is_asked_again() -> None:
    with fake_broker(None) as silent:
        assert broker_traits(silent, timeout_s=1) == EMBEDDED_BROKER
        assert silent not in kafka._traits
    with fake_broker(api_versions([37, 68])) as server:
        # the first server of the list does not answer: the next one does
        assert broker_traits(f"127.0.0.1:1, {server}", timeout_s=1) == FULL_KAFKA
        assert f"127.0.0.1:1,{server}" in kafka._traits


def test_a_huge_announced_answer_is_not_read() -> None:
    with fake_broker(struct.pack(">i", 1 << 30)) as server:
        assert broker_traits(server, timeout_s=1) == EMBEDDED_BROKER


def test_a_cluster_behind_tls_is_taken_for_kafka_unprobed() -> None:
    assert broker_traits("127.0.0.1:1", "SSL") == FULL_KAFKA
    kafka._traits.clear()


def test_a_cluster_that_answers_late_is_waited_for() -> None:
    """A worker started while its cluster restarts waits for the probe's answer rather
    than taking the cluster for the embedded broker (and refusing exactly once)."""
    spare = socket.create_server(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there for a while
    answer = api_versions([37, 68])

    def serve_late() -> None:
        time.sleep(1.5)
        with socket.create_server(("127.0.0.1", port)) as server:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(answer)

    thread = threading.Thread(target=serve_late, daemon=True)
    thread.start()
    try:
        assert broker_traits(f"127.0.0.1:{port}", timeout_s=1, wait_s=20) == FULL_KAFKA
    finally:
        thread.join(5)
        kafka._traits.clear()
