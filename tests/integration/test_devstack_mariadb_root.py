"""The dev MariaDB's root has a password of its own (issue 41): without it root is
refused over the socket, and over TCP root is refused whatever it sends."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pymysql
import pytest

ACCESS_DENIED = 1045


def _socket(dsn: str) -> str:
    url = urlsplit(dsn)
    conn = pymysql.connect(
        host=url.hostname, port=url.port, user=url.username, password=url.password or ""
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@socket")
            row: Any = cur.fetchone()
            return str(row[0])
    finally:
        conn.close()


def _refused(**where: Any) -> int:
    with pytest.raises(pymysql.err.OperationalError) as refused:
        pymysql.connect(user="root", connect_timeout=5, **where).close()
    return int(refused.value.args[0])


def test_root_needs_its_password(bizevents_mysql: str) -> None:
    url = urlsplit(bizevents_mysql)
    tcp = {"host": "127.0.0.1", "port": url.port}
    assert _refused(**tcp) == ACCESS_DENIED
    assert _refused(**tcp, password=url.password) == ACCESS_DENIED
    socket = _socket(bizevents_mysql)
    assert _refused(unix_socket=socket) == ACCESS_DENIED
    assert _refused(unix_socket=socket, password=url.password) == ACCESS_DENIED
