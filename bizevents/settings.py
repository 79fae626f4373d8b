"""The application's settings: one frozen object read from the environment (``BIZEVENTS_*``) and an
optional TOML file.

Nested groups use a double underscore in the environment, for example
``BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS`` or ``BIZEVENTS_REGISTRY__URL``. The TOML file is
named by ``BIZEVENTS_CONFIG`` or ``--config``; the environment wins over the file.
Secrets are ``SecretStr`` (or read from a file named by a ``*_file`` setting) so that
they never print in a log line or a ``repr``.

The commands then fill what neither names from a running dev stack (``bizevents dev up``
records its endpoints in ``<state_dir>/stack.json``): the broker, the registry and the
databases' DSNs (:func:`bizevents.devstack.stack.with_running_stack`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.settings import (
    DatabaseSettings,
    KafkaSettings,
    LoopbackHost,
    RegistrySettings,
    SettingsGroup,
)
from bizevents.translators.settings import RuntimeSettings, TransactionSettings, TranslateSettings

CONFIG_ENV = "BIZEVENTS_CONFIG"


class DevSettings(SettingsGroup):
    """Ports of the embedded stack; 0 means any free port."""

    host: LoopbackHost = "127.0.0.1"
    broker_port: int = Field(default=19092, ge=0, le=65535)
    registry_port: int = Field(default=18081, ge=0, le=65535)
    postgres_port: int = Field(default=15432, ge=0, le=65535)
    postgres_bin_dir: Path | None = None
    #: The broker ``dev up`` starts: the embedded Tansu (memory storage, no Java) or
    #: Apache Kafka (KRaft, data on disk; its jars fetched with Maven).
    broker: Literal["tansu", "kafka"] = "tansu"
    #: Apache Kafka's nodes: 3 is a cluster with replication factor 3, min.insync.replicas 2.
    brokers: int = Field(default=1, ge=1, le=5)
    #: Also start the MariaDB server (``bizevents dev up --mysql`` sets it).
    mysql: bool = False
    mysql_port: int = Field(default=13306, ge=0, le=65535)


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
    transactions: TransactionSettings = TransactionSettings()
    #: Which version of each translator runs live, e.g. ``{"orders": 2}``; in TOML a
    #: ``[translators]`` table, in the environment ``BIZEVENTS_TRANSLATORS='{"orders": 2}'``.
    translators: dict[str, int] = Field(default_factory=dict)
    state_dir: Path = Path(".bizevents")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = "auto"

    def runtime(self) -> RuntimeSettings:
        """The groups the worker and the replay read, and nothing else."""
        return RuntimeSettings(
            kafka=self.kafka,
            registry=self.registry,
            translate=self.translate,
            translators=dict(self.translators),
            state_dir=self.state_dir,
        )

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
    from pydantic_settings import SettingsError

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
    except SettingsError as exc:
        # pydantic-settings' own words name the field and the source ("error parsing
        # value for field "translators" from source "EnvSettingsSource""), never the value.
        raise ConfigError(f"invalid settings: {exc} (a list or a table must be JSON)") from None
