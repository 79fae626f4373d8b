"""The settings groups: security settings handed to both Kafka clients, clashes named,
the registry's credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from bizevents.plumbing.errors import ConfigError
from bizevents.plumbing.settings import KafkaSettings, RegistrySettings


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


def test_registry_basic_auth_config() -> None:
    registry = RegistrySettings(
        url="https://registry.invalid",
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
