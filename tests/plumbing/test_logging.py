"""Logging: JSON off a terminal, bound context, and no secret in any line."""

from __future__ import annotations

import json
import logging

import pytest
import structlog
from hypothesis import assume, example, given
from hypothesis import strategies as st
from pydantic import SecretStr

from bizevents.plumbing.logging import MASK, configure_logging, get_logger, redact_text


@pytest.fixture
def json_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    structlog.reset_defaults()
    configure_logging("INFO", "json")
    log = get_logger("test", component="capture")
    log.bind(topic="db.public.orders", partition=3, offset=42).info("event produced")
    log.info(
        "connecting",
        dsn="postgresql://app:pg-secret@db:5432/shop",
        password=SecretStr("sr-secret"),
        conf={"sasl.password": "kafka-secret", "bootstrap.servers": "k:9092"},
    )
    logging.getLogger("stdlib.lib").warning("url http://user:lib-secret@host/x")
    err = capsys.readouterr().err
    structlog.reset_defaults()
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_context_is_bound_not_formatted(json_lines: list[dict[str, object]]) -> None:
    first = json_lines[0]
    assert first["event"] == "event produced"
    assert (first["component"], first["topic"], first["partition"], first["offset"]) == (
        "capture",
        "db.public.orders",
        3,
        42,
    )
    assert first["level"] == "info"


def test_no_secret_in_any_line(json_lines: list[dict[str, object]]) -> None:
    text = json.dumps(json_lines)
    for secret in ("pg-secret", "sr-secret", "kafka-secret", "lib-secret"):
        assert secret not in text
    assert "k:9092" in text  # non-secrets stay readable


def test_redact_text_keeps_user_and_host() -> None:
    assert redact_text("postgresql://app:pw@db:5432/x") == "postgresql://app:**********@db:5432/x"
    assert redact_text("no url here") == "no url here"


def _sql_quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1))
@example("it's")
@example("back\\slash")
def test_sql_credentials_are_masked(password: str) -> None:
    """DDL read from a log (capture logs it) never shows a password, however quoted."""
    assume(password != MASK)
    quoted = _sql_quoted(password)
    masked = f"'{MASK}'"
    for sql, expected in (
        (
            f"CREATE USER 'u'@'%' IDENTIFIED BY {quoted}",
            f"CREATE USER 'u'@'%' IDENTIFIED BY {masked}",
        ),
        (f"ALTER USER u IDENTIFIED VIA ed25519 USING PASSWORD({quoted})", None),
        (f"SET PASSWORD FOR 'u'@'h' = PASSWORD({quoted})", None),
        (f"SET PASSWORD FOR 'u'@'h' = {quoted}", f"SET PASSWORD FOR 'u'@'h' = {masked}"),
        (f"CREATE ROLE app LOGIN PASSWORD {quoted}", f"CREATE ROLE app LOGIN PASSWORD {masked}"),
        (
            f"host=db user=app password={quoted} dbname=x",
            f"host=db user=app password={masked} dbname=x",
        ),
    ):
        out = redact_text(sql)
        # (a password such as '@' or '%' is also part of the statement's own text there)
        assert out.count(quoted) == sql.count(quoted) - 1
        assert MASK in out
        if expected is not None:
            assert out == expected
    # a log line cut inside the literal
    cut = f"CREATE USER u IDENTIFIED BY {quoted}"[:-1]
    assert redact_text(cut) == f"CREATE USER u IDENTIFIED BY {masked}"


def test_sql_without_credentials_is_kept() -> None:
    sql = "ALTER TABLE store.orders ADD COLUMN note text DEFAULT 'password'"
    assert redact_text(sql) == sql


def test_no_line_per_http_request_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    """The registry client's httpx logs each request at INFO: one line per schema looked
    up by `read` and capture. At INFO nothing of it shows; its warnings would."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import httpx

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/subjects"
    try:
        structlog.reset_defaults()
        configure_logging("INFO", "json")
        httpx.get(url)
        logging.getLogger("httpx").warning("a warning still shows")
        err = capsys.readouterr().err
    finally:
        server.shutdown()
        structlog.reset_defaults()
    assert [json.loads(line)["event"] for line in err.splitlines()] == ["a warning still shows"]
