"""Settings groups every layer may take: Kafka, the schema registry, the databases.

Each package takes the group it needs (capture the Kafka and database groups, the
worker Kafka, registry and its own ``bizevents.translators.settings.TranslateSettings``), never
the application's whole settings, which the shell (``bizevents.settings``) composes.
Secrets are ``SecretStr`` or read from a file named by a ``*_file`` setting, so that they
never print in a log line or a ``repr``.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.logging import librdkafka_logging

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
LoopbackHost = Literal["127.0.0.1", "::1", "localhost"]


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


class SettingsGroup(BaseModel):
    """A frozen group of settings; an unknown key is an error, never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(SettingsGroup):
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


class RegistrySettings(SettingsGroup):
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


class DatabaseSettings(SettingsGroup):
    """Database connections; DSNs hold passwords, so they are secrets as a whole."""

    postgres_dsn: SecretStr | None = None
    mysql_dsn: SecretStr | None = None
