"""The capture tests' database: one per test, on the source the test is marked for, on
each source in turn (``source``), or on the one it names (``pg``, ``my``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bizevents.devstack import Endpoints
from tests.capture.capture_helpers import Db, database
from tests.capture.mysql_helpers import MyDb, mysql_database
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


@pytest.fixture
def pg(bizevents_stack: Endpoints) -> Iterator[Db]:
    """A fresh schema on the stack's PostgreSQL, for a test that names its source."""
    with database(bizevents_stack) as made:
        yield made


@pytest.fixture
def my(bizevents_mysql: str, bizevents_stack: Endpoints) -> Iterator[MyDb]:
    """A fresh database on the session's MariaDB, for a test that names its source."""
    with mysql_database(bizevents_mysql, bizevents_stack) as made:
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
