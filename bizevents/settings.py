"""Settings: one frozen object read from the environment (``BIZEVENTS_*``) and an
optional TOML file.

Nested groups use a double underscore in the environment, for example
``BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS`` or ``BIZEVENTS_REGISTRY__URL``. The TOML file is
named by ``BIZEVENTS_CONFIG`` or ``--config``; the environment wins over the file.
Secrets are ``SecretStr`` (or read from a file named by a ``*_file`` setting) so that
they never print in a log line or a ``repr``.
"""

from __future__ import annotations

import os
import ssl
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bizevents.exceptions import ConfigError
from bizevents.logging import librdkafka_logging

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]

CONFIG_ENV = "BIZEVENTS_CONFIG"


def _secret(value: SecretStr | None, file: Path | None, what: str) -> str | None:
    """A secret given inline or by file; both at once is a clash, never a silent pick."""
    if value is not None and file is not None:
        raise ConfigError(f"{what} is given both inline and as a file; keep one of them")
    if file is not None:
        try:
            return file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {what} from {file}: {exc.strerror}") from exc
    return value.get_secret_value() if value is not None else None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Frozen):
    """How every Kafka client (librdkafka and aiokafka alike) reaches the cluster."""

    bootstrap_servers: str = "127.0.0.1:19092"
    client_id: str = "bizevents"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _coherent(self) -> KafkaSettings:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(
                f"kafka.security_protocol={self.security_protocol} needs kafka.sasl_mechanism"
            )
        if not sasl and (self.sasl_mechanism or self.sasl_username):
            raise ValueError(
                "kafka.sasl_mechanism/sasl_username are set but "
                f"kafka.security_protocol={self.security_protocol} does not use SASL"
            )
        has_password = self.sasl_password is not None or self.sasl_password_file is not None
        if self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
            self.sasl_username and has_password
        ):
            raise ValueError(
                f"kafka.sasl_mechanism={self.sasl_mechanism} needs kafka.sasl_username and "
                "kafka.sasl_password (or kafka.sasl_password_file)"
            )
        tls_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if not self.security_protocol.endswith("SSL") and any(tls_files):
            raise ValueError(
                "kafka.ssl_* files are set but "
                f"kafka.security_protocol={self.security_protocol} does not use TLS"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("kafka.ssl_certfile and kafka.ssl_keyfile go together")
        return self

    def librdkafka(self) -> dict[str, Any]:
        """The same settings as a confluent-kafka (librdkafka) configuration."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
            **librdkafka_logging(),
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        password = _secret(self.sasl_password, self.sasl_password_file, "kafka.sasl_password")
        if password is not None:
            conf["sasl.password"] = password
        if self.ssl_cafile:
            conf["ssl.ca.location"] = str(self.ssl_cafile)
        if self.ssl_certfile:
            conf["ssl.certificate.location"] = str(self.ssl_certfile)
        if self.ssl_keyfile:
            conf["ssl.key.location"] = str(self.ssl_keyfile)
        if self.ssl_key_password:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if self.security_protocol.endswith("SSL") and not self.ssl_check_hostname:
            conf["ssl.endpoint.identification.algorithm"] = "none"
        return conf

    def aiokafka(self) -> dict[str, Any]:
        """The same settings as aiokafka keyword arguments (Faust passes these through)."""
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl_mechanism"] = self.sasl_mechanism
            conf["sasl_plain_username"] = self.sasl_username
            conf["sasl_plain_password"] = _secret(
                self.sasl_password, self.sasl_password_file, "kafka.sasl_password"
            )
        if self.security_protocol.endswith("SSL"):
            conf["ssl_context"] = self.ssl_context()
        return conf

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None
        )
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile and self.ssl_keyfile:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            context.load_cert_chain(str(self.ssl_certfile), str(self.ssl_keyfile), password)
        return context


class RegistrySettings(_Frozen):
    """Where the schema registry is (Confluent-compatible; the embedded one by default)."""

    url: str = "http://127.0.0.1:18081"
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    basic_auth_password_file: Path | None = None
    ssl_cafile: Path | None = None

    def client_config(self) -> dict[str, Any]:
        """Configuration for confluent-kafka's ``SchemaRegistryClient``."""
        conf: dict[str, Any] = {"url": self.url}
        password = _secret(
            self.basic_auth_password, self.basic_auth_password_file, "registry.basic_auth_password"
        )
        if self.basic_auth_user:
            if password is None:
                raise ConfigError("registry.basic_auth_user is set without a password")
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{password}"
        if self.ssl_cafile:
            conf["ssl.ca.location"] = str(self.ssl_cafile)
        return conf


class DatabaseSettings(_Frozen):
    """Database connections; DSNs hold passwords, so they are secrets as a whole."""

    postgres_dsn: SecretStr | None = None
    mysql_dsn: SecretStr | None = None


class DevSettings(_Frozen):
    """Ports of the embedded stack; 0 means any free port."""

    host: Literal["127.0.0.1", "::1", "localhost"] = "127.0.0.1"
    broker_port: int = Field(default=19092, ge=0, le=65535)
    registry_port: int = Field(default=18081, ge=0, le=65535)
    postgres_port: int = Field(default=15432, ge=0, le=65535)
    postgres_bin_dir: Path | None = None


class TranslateSettings(_Frozen):
    """The translator worker (``bizevents translate``): group, topics, batching, metrics.

    The group settings default to what the embedded broker needs (a 6 s session: it
    holds every JoinGroup for half the session, see docs/broker.md); on a Kafka
    cluster use its usual values (e.g. 45 s).
    """

    #: The consumer group every worker joins; also the Faust app id.
    group_id: str = "bizevents-translate"
    #: Technical topics are ``<topic_prefix>.<schema>.<table>``; the prefix is the
    #: capture's ``server`` (or its ``topic_prefix``).
    topic_prefix: str | None = None
    #: Explicit technical topics, instead of deriving them from the translators' sources.
    topics: tuple[str, ...] = ()
    dead_letter_topic: str = "bizevents.dead-letter"
    subject_strategy: Literal["topic", "record", "topic-record"] = "topic"
    auto_register: bool = True
    #: Partitions of business and dead-letter topics the worker creates when missing.
    output_partitions: int = Field(default=4, ge=1)
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"
    #: Prometheus text endpoint on loopback; ``None`` turns it off, 0 picks a free port.
    metrics_host: Literal["127.0.0.1", "::1", "localhost"] = "127.0.0.1"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: Records per fetched block (one block of one partition is translated at once).
    max_poll_records: int = Field(default=5000, ge=1)
    max_fetch_bytes: int = Field(default=4 << 20, ge=1024)
    #: How long the broker may hold an empty fetch. Faust's own 1,500 ms adds up to that
    #: much latency on the embedded broker, where records that arrive meanwhile often wait
    #: for the held fetch to end (docs/broker.md); polling an idle broker 10 times a
    #: second costs little.
    fetch_max_wait_ms: int = Field(default=100, ge=0, le=60_000)
    #: Blocks whose produce acknowledgements may be outstanding at once.
    max_inflight_blocks: int = Field(default=3, ge=1)
    linger_ms: float = Field(default=5.0, ge=0)
    max_batch_bytes: int = Field(default=1 << 20, ge=1024)
    commit_interval_s: float = Field(default=1.0, gt=0)
    session_timeout_s: float = Field(default=6.0, gt=0)
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    rebalance_timeout_s: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _coherent(self) -> TranslateSettings:
        if self.heartbeat_interval_s * 3 > self.session_timeout_s:
            raise ValueError(
                f"translate.heartbeat_interval_s={self.heartbeat_interval_s} must be at most a "
                f"third of translate.session_timeout_s={self.session_timeout_s}"
            )
        return self


class Settings(BaseSettings):
    """Everything bizevents reads from its environment, frozen once read."""

    model_config = SettingsConfigDict(
        env_prefix="BIZEVENTS_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    kafka: KafkaSettings = KafkaSettings()
    registry: RegistrySettings = RegistrySettings()
    database: DatabaseSettings = DatabaseSettings()
    dev: DevSettings = DevSettings()
    translate: TranslateSettings = TranslateSettings()
    #: Which version of each translator runs live, e.g. ``{"orders": 2}``; in TOML a
    #: ``[translators]`` table, in the environment ``BIZEVENTS_TRANSLATORS='{"orders": 2}'``.
    translators: dict[str, int] = Field(default_factory=dict)
    state_dir: Path = Path(".bizevents")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = "auto"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_ENV)
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


def check_toml_file(path: Path) -> None:
    """Read and parse the settings file, so that a problem is a sentence naming it.

    pydantic-settings would skip a missing file silently and let a syntax error escape
    as a traceback. tomllib's messages give the line and column, never the content.
    """
    if not path.is_file():
        raise ConfigError(f"the configuration file {path} does not exist")
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"the configuration file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the configuration file {path} is not valid TOML: {exc}") from None


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Read the settings; a bad value becomes a ``ConfigError`` naming the setting."""
    from pydantic import ValidationError

    if config_file is None and os.environ.get(CONFIG_ENV):
        config_file = Path(os.environ[CONFIG_ENV])
    if config_file is not None:
        check_toml_file(config_file)
        os.environ[CONFIG_ENV] = str(config_file)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
