"""Settings: environment, TOML file, secrets, and the configs handed to both Kafka clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings
from bizevents.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("BIZEVENTS_"):
            monkeypatch.delenv(key)


def test_environment_with_prefix_and_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    """BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS reaches kafka.bootstrap_servers."""
    monkeypatch.setenv("BIZEVENTS_KAFKA__BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("BIZEVENTS_REGISTRY__URL", "https://sr.example:8081")
    settings = load_settings()
    assert settings.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert settings.kafka.aiokafka()["bootstrap_servers"] == ["k1:9092", "k2:9092"]
    assert settings.registry.url == "https://sr.example:8081"


def test_toml_file_and_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TOML file sets values; the environment overrides the file."""
    config = tmp_path / "bizevents.toml"
    config.write_text('log_level = "DEBUG"\n[kafka]\nbootstrap_servers = "file:9092"\n')
    monkeypatch.setenv("BIZEVENTS_LOG_LEVEL", "WARNING")
    settings = load_settings(config)
    assert settings.kafka.bootstrap_servers == "file:9092"
    assert settings.log_level == "WARNING"


def test_missing_config_file_is_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError):
        settings.log_level = "DEBUG"  # type: ignore[misc]


def test_secrets_never_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passwords are SecretStr: absent from repr and str of the whole settings."""
    monkeypatch.setenv("BIZEVENTS_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("BIZEVENTS_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("BIZEVENTS_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("BIZEVENTS_KAFKA__SASL_PASSWORD", "hunter2-kafka")
    monkeypatch.setenv("BIZEVENTS_DATABASE__POSTGRES_DSN", "postgresql://u:hunter2-pg@h/db")
    settings = load_settings()
    assert "hunter2" not in repr(settings)
    assert "hunter2" not in str(settings.model_dump())


def test_sasl_and_tls_pass_through_to_both_clients(tmp_path: Path) -> None:
    """Every security setting reaches librdkafka and aiokafka alike."""
    password_file = tmp_path / "kafka.pw"
    password_file.write_text("s3cret\n")
    kafka = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="svc",
        sasl_password_file=password_file,
        ssl_check_hostname=False,
    )
    rd = kafka.librdkafka()
    assert rd["security.protocol"] == "SASL_SSL"
    assert rd["sasl.mechanism"] == "SCRAM-SHA-256"
    assert (rd["sasl.username"], rd["sasl.password"]) == ("svc", "s3cret")
    assert rd["ssl.endpoint.identification.algorithm"] == "none"
    aio = kafka.aiokafka()
    assert aio["security_protocol"] == "SASL_SSL"
    assert aio["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (aio["sasl_plain_username"], aio["sasl_plain_password"]) == ("svc", "s3cret")
    assert aio["ssl_context"].check_hostname is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"security_protocol": "SASL_PLAINTEXT"}, "needs kafka.sasl_mechanism"),
        ({"sasl_mechanism": "PLAIN"}, "does not use SASL"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
            "needs kafka.sasl_username",
        ),
        ({"ssl_cafile": "/ca.pem"}, "does not use TLS"),
        ({"security_protocol": "SSL", "ssl_certfile": "/c.pem"}, "go together"),
    ],
    ids=[
        "sasl-without-mechanism",
        "mechanism-without-sasl",
        "plain-without-user",
        "tls-file-on-plaintext",
        "cert-without-key",
    ],
)
def test_clashing_kafka_settings_name_the_keys(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaSettings(**fields)  # type: ignore[arg-type]


def test_invalid_environment_value_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIZEVENTS_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(ConfigError, match=r"kafka: .*sasl_mechanism"):
        load_settings()


def test_registry_basic_auth_config() -> None:
    registry = RegistrySettings(
        url="https://sr:8081",
        basic_auth_user="u",
        basic_auth_password="p",  # type: ignore[arg-type]
    )
    assert registry.client_config()["basic.auth.user.info"] == "u:p"
    assert "'p'" not in repr(registry)


def test_secret_inline_and_file_clash(tmp_path: Path) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text("x")
    registry = RegistrySettings(
        basic_auth_user="u",
        basic_auth_password="p",  # type: ignore[arg-type]
        basic_auth_password_file=password_file,
    )
    with pytest.raises(ConfigError, match="both inline and as a file"):
        registry.client_config()
