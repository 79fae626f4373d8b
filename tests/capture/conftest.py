"""The capture tests' database: one per test, on the source the test is marked for, or
on each source in turn (``source``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import database
from tests.capture.mysql_helpers import mysql_database
from tests.capture.sources import MySource, PgSource, Source


@pytest.fixture
def db(request: pytest.FixtureRequest, bizevents_stack: Endpoints) -> Iterator[Any]:
    """A fresh database of this test: on the session's MariaDB for a test marked
    ``mysql`` (a MyDb), else a schema on the stack's PostgreSQL (a Db)."""
    if request.node.get_closest_marker("mysql") is not None:
        with mysql_database(request.getfixturevalue("bizevents_mysql"), bizevents_stack) as made:
            yield made
    else:
        with database(bizevents_stack) as made:
            yield made


@pytest.fixture(params=["postgres", pytest.param("mariadb", marks=pytest.mark.mysql)])
def source(request: pytest.FixtureRequest, bizevents_stack: Endpoints) -> Iterator[Source]:
    """A fresh database on each source in turn: a test whose behaviour is the same on
    PostgreSQL and MariaDB is written once."""
    if request.param == "mariadb":
        with mysql_database(request.getfixturevalue("bizevents_mysql"), bizevents_stack) as my:
            yield MySource(my)
    else:
        with database(bizevents_stack) as pg:
            yield PgSource(pg)
