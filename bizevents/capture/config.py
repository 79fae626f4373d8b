"""The configuration of one PostgreSQL capture: a TOML file, checked when it is read.

Kafka, the schema registry and the default DSN come from the global
:class:`~bizevents.settings.Settings`; this file says *what* to capture::

    server = "shop"                      # topic prefix and source.name
    # dsn = "postgresql://..."           # default: settings database.postgres_dsn
    tables = ["public.orders", "public.customers"]   # or: publication = "existing_pub"
    slot = "bizevents_shop"
    partitions = 3

    [columns."public.customers"]
    exclude = ["password_hash"]

Impossible combinations fail at once with a sentence that names the keys.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from bizevents.plumbing.errors import ConfigError

__all__ = ["CaptureConfig", "ColumnFilter", "load_capture_config"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_TOPIC_PART = re.compile(r"^[A-Za-z0-9._-]+$")


class ColumnFilter(BaseModel):
    """Which columns of one table are captured: an include list or an exclude list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_of(self) -> ColumnFilter:
        if self.include is not None and self.exclude:
            raise ValueError("give either include or exclude for a table, not both")
        return self

    def keeps(self, column: str) -> bool:
        """Whether ``column`` is captured."""
        if self.include is not None:
            return column in self.include
        return column not in self.exclude


class CaptureConfig(BaseModel):
    """What one capture process reads and where it writes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Logical name of the database server: ``source.name`` and the default topic prefix.
    server: str
    dsn: SecretStr | None = None
    #: ``schema.table`` names; the publication is created (or extended) to hold them.
    tables: tuple[str, ...] = ()
    #: An existing publication to capture (its tables), or the name to create.
    publication: str | None = None
    slot: str | None = None
    topic_prefix: str | None = None
    partitions: int = Field(default=1, ge=1)
    replication_factor: int = -1
    columns: dict[str, ColumnFilter] = Field(default_factory=dict)
    #: ``initial``: snapshot when the slot is new; ``never``: stream only.
    snapshot: Literal["initial", "never"] = "initial"
    snapshot_fetch_rows: int = Field(default=5_000, ge=1)
    #: Rows per chunk of an incremental snapshot (the memory it holds).
    incremental_chunk_rows: int = Field(default=1_024, ge=1)
    #: The longest an incremental snapshot's chunk query (or a condition's check) may
    #: run: a statement timeout; a snapshot whose chunk goes past it is stopped.
    snapshot_query_timeout_s: float = Field(default=60.0, gt=0)
    #: Tables added to ``tables`` after the first run get an incremental snapshot.
    snapshot_new_tables: bool = True
    #: The signal table in the source database (``schema.table``, Debezium's
    #: ``debezium_signal``); ``None``: signals come from the signal topic only.
    signal_table: str | None = None
    #: The Kafka signal topic (default ``<server>.capture.signals``).
    signal_topic: str | None = None
    #: Capture columns of unmapped types as their text form instead of refusing them.
    unknown_as_text: bool = False
    #: Produce an op ``t`` event (to every partition, null key) for TRUNCATE. Off by
    #: default, as Debezium's ``skipped.operations=t``: a compacted topic takes no keyless
    #: record (Kafka refuses it, and capture dead-letters it).
    truncate_events: bool = False
    #: Events produced but not yet acknowledged by Kafka before reading the slot pauses.
    max_in_flight: int = Field(default=50_000, ge=1)
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    #: Also write a non-transactional ``pg_logical_emit_message`` each heartbeat so that
    #: an otherwise idle database moves the slot on.
    heartbeat_emit: bool = False
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
    linger_ms: int = Field(default=20, ge=0)
    #: Loopback port of the Prometheus text endpoint; ``None`` switches it off, 0 picks one.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: Literal["127.0.0.1", "::1", "localhost"] = "127.0.0.1"
    #: Unused since capture's state moved to Kafka (:attr:`offsets_topic_name`); accepted
    #: so that existing files still load.
    state_dir: Path | None = None
    progress: Literal["auto", "always", "never"] = "auto"
    #: A value that cannot be converted (a numeric of more than 4,300 digits, NaN in a
    #: decimal column): ``dead-letter`` writes the raw change to :attr:`dlq_topic` and
    #: goes on, ``skip`` logs and counts it, ``fail`` stops capture. ``park`` (PostgreSQL
    #: streaming) also parks the change's key: its later changes go to :attr:`dlq_topic`
    #: marked parked until ``bizevents capture redrive`` (docs/parking.md).
    on_conversion_error: Literal["dead-letter", "fail", "skip", "park"] = "dead-letter"
    #: The compacted topic of the parked keys (default ``<server>.capture.parked``).
    parked_topic: str | None = None
    #: Parked keys at most; parking one more stops capture with a sentence.
    max_parked_keys: int = Field(default=10_000, ge=1)
    #: The capture dead-letter topic (default ``<server>.capture.dlq``).
    dead_letter_topic: str | None = None
    #: Debezium's transaction metadata: each streamed envelope's ``transaction`` block
    #: and BEGIN/END records on ``<prefix>.transaction`` (docs/transactions.md).
    transaction_metadata: bool = True
    #: MySQL: the Kafka key's columns of tables without a primary key (``db.table``).
    keys: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: Routing by business key: per table, the primary-key columns whose values choose
    #: the partition of every record of it (docs/transactions.md). Unnamed tables are
    #: partitioned by their Kafka key.
    routing: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: The compacted topic of capture's state: the snapshot ledger, MySQL's binlog
    #: position (default ``<server>.capture.offsets``).
    offsets_topic: str | None = None
    #: MySQL: the server id the binlog client registers with (unique among replicas;
    #: 0 picks one from the server name).
    replica_server_id: int = Field(default=0, ge=0, lt=2**32)

    @model_validator(mode="after")
    def _coherent(self) -> CaptureConfig:
        if not self.tables and not self.publication:
            raise ValueError("name the tables to capture (tables = [...]) or a publication")
        if not _TOPIC_PART.match(self.server):
            raise ValueError(f"server {self.server!r} may only hold letters, digits, '.', '_', '-'")
        signal = (self.signal_table,) if self.signal_table else ()
        for name in (*self.tables, *self.columns, *self.routing, *signal):
            schema, dot, table = name.partition(".")
            if not dot or not _IDENT.match(schema) or not _IDENT.match(table):
                raise ValueError(f"table {name!r} must be written schema.table (plain identifiers)")
        unknown = set(self.columns) - set(self.tables) if self.tables else set()
        if unknown:
            raise ValueError(f"columns are filtered for tables not captured: {sorted(unknown)}")
        unrouted = set(self.routing) - set(self.tables) if self.tables else set()
        if unrouted:
            raise ValueError(f"routing names tables not captured: {sorted(unrouted)}")
        for name, by in self.routing.items():
            if not by or len(set(by)) != len(by):
                raise ValueError(f"routing of {name} must name one or more distinct columns")
        for what in (self.slot_name, self.publication_name):
            if not _IDENT.match(what) or what != what.lower():
                raise ValueError(f"{what!r} is not a valid slot/publication name (lowercase)")
        if self.dead_letter_topic is not None and not _TOPIC_PART.match(self.dead_letter_topic):
            raise ValueError(
                f"dead_letter_topic {self.dead_letter_topic!r} may only hold letters, digits, "
                "'.', '_', '-'"
            )
        return self

    @property
    def slot_name(self) -> str:
        """The replication slot (default ``bizevents_<server>``)."""
        return self.slot or "bizevents_" + re.sub(r"[^a-z0-9_]", "_", self.server.lower())

    @property
    def publication_name(self) -> str:
        """The publication (default: the slot's name)."""
        return self.publication or self.slot_name

    @property
    def prefix(self) -> str:
        """The topic prefix (default: the server name)."""
        return self.topic_prefix or self.server

    @property
    def dlq_topic(self) -> str:
        """The capture dead-letter topic."""
        return self.dead_letter_topic or f"{self.server}.capture.dlq"

    @property
    def parked_topic_name(self) -> str:
        """The compacted topic of the parked keys and the re-drive requests."""
        return self.parked_topic or f"{self.server}.capture.parked"

    @property
    def offsets_topic_name(self) -> str:
        """The compacted topic of capture's state (ledger, MySQL's position)."""
        return self.offsets_topic or f"{self.server}.capture.offsets"

    @property
    def signal_topic_name(self) -> str:
        """The Kafka topic ``bizevents capture snapshot`` writes signals to."""
        return self.signal_topic or f"{self.server}.capture.signals"

    def column_filter(self, qualified: str) -> ColumnFilter:
        """The column filter of ``schema.table`` (keep everything by default)."""
        return self.columns.get(qualified) or ColumnFilter()


def load_capture_config(path: Path) -> CaptureConfig:
    """Read and check a capture TOML file; problems become one ConfigError sentence."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the capture configuration {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the capture configuration {path} is not UTF-8 text (byte {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    try:
        return CaptureConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid capture configuration {path}: {problems}") from None
