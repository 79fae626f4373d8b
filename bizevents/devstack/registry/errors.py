"""The registry's refusals, with Confluent's HTTP statuses, error codes and wording.

Every refusal is a ``bizevents.contracts.exceptions.RegistryError``; the HTTP layer turns it into
``{"error_code": N, "message": "..."}`` with ``status`` as the HTTP status.
"""

from __future__ import annotations

from bizevents.contracts.exceptions import RegistryError

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
# Confluent used the bare HTTP status for years; its newest releases say 40901.
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
STORE_ERROR = 50001


def _refused(message: str, error_code: int) -> RegistryError:
    # Confluent's codes are the HTTP status, or the status and two digits more.
    status = error_code if error_code < 1000 else error_code // 100
    return RegistryError(message, status=status, error_code=error_code)


def subject_not_found(subject: str) -> RegistryError:
    return _refused(f"Subject '{subject}' not found.", SUBJECT_NOT_FOUND)


def version_not_found(version: int | str) -> RegistryError:
    return _refused(f"Version {version} not found.", VERSION_NOT_FOUND)


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    message = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return _refused(message, SCHEMA_NOT_FOUND)


def subject_soft_deleted(subject: str) -> RegistryError:
    return _refused(
        f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
        SUBJECT_SOFT_DELETED,
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return _refused(
        f"Subject '{subject}' was not deleted first before being permanently deleted",
        SUBJECT_NOT_SOFT_DELETED,
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return _refused(
        f"Subject '{subject}' Version {version} was soft deleted. "
        "Set permanent=true to delete permanently",
        VERSION_SOFT_DELETED,
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return _refused(
        f"Subject '{subject}' Version {version} was not deleted first before being "
        "permanently deleted",
        VERSION_NOT_SOFT_DELETED,
    )


def compatibility_not_configured(subject: str) -> RegistryError:
    return _refused(
        f"Subject '{subject}' does not have subject-level compatibility configured",
        SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
    )


def incompatible_schema(subject: str, messages: list[str] | tuple[str, ...]) -> RegistryError:
    details = "; ".join(messages)
    return _refused(
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}",'
        f" details: {details}",
        INCOMPATIBLE_SCHEMA,
    )


def invalid_schema(reason: str) -> RegistryError:
    return _refused(reason, INVALID_SCHEMA)


def invalid_version(version: str) -> RegistryError:
    return _refused(
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
        INVALID_VERSION,
    )


def invalid_compatibility_level() -> RegistryError:
    return _refused(
        "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
        INVALID_COMPATIBILITY_LEVEL,
    )


def invalid_mode(mode: object) -> RegistryError:
    given = "The request body names no mode" if mode is None else f"Invalid mode {mode!r}"
    return _refused(
        f"{given}: the embedded registry serves READWRITE only "
        "(IMPORT and READONLY are not supported)",
        INVALID_MODE,
    )


def not_permitted(reason: str) -> RegistryError:
    return _refused(reason, OPERATION_NOT_PERMITTED)


def store_failed(reason: str) -> RegistryError:
    return _refused(reason, STORE_ERROR)


def unsupported_media_type(given: str) -> RegistryError:
    return _refused(
        f"Content-Type {given[:100]!r} is not accepted for a write: send "
        "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json "
        "or application/json",
        415,
    )


def bad_request(reason: str, status: int = 400) -> RegistryError:
    """Malformed HTTP requests: like Confluent, the error code is the HTTP status."""
    return RegistryError(reason, status=status, error_code=status)
