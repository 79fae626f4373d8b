"""The process settings: environment, TOML file, secrets kept out of every repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from bizevents.plumbing.errors import ConfigError
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


def test_invalid_environment_value_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIZEVENTS_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(ConfigError, match=r"kafka: .*sasl_mechanism"):
        load_settings()
