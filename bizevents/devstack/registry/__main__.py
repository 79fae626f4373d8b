"""Command line: run the embedded schema registry until SIGTERM or SIGINT.

    python -m bizevents.devstack.registry --host 127.0.0.1 --port 8081 --data-dir DIR \
        [--basic-auth-user U --basic-auth-password-file F]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import structlog

from bizevents.devstack.registry.server import BasicAuth, start
from bizevents.plumbing.errors import BizeventsError, ConfigError
from bizevents.plumbing.logging import configure_logging

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bizevents.devstack.registry",
        description="Run the embedded Confluent-compatible schema registry.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8081, help="port (0 picks a free one)")
    parser.add_argument("--data-dir", type=Path, required=True, help="where state is kept")
    parser.add_argument("--basic-auth-user", help="require HTTP basic auth as this user")
    parser.add_argument(
        "--basic-auth-password-file",
        type=Path,
        help="file holding the basic-auth password (first line); needs --basic-auth-user",
    )
    return parser


def _basic_auth(args: argparse.Namespace) -> BasicAuth | None:
    if args.basic_auth_user is None and args.basic_auth_password_file is None:
        return None
    if args.basic_auth_user is None or args.basic_auth_password_file is None:
        raise ConfigError("--basic-auth-user and --basic-auth-password-file must be given together")
    try:
        password = args.basic_auth_password_file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the basic-auth password file: {exc}") from exc
    if not password or not password[0]:
        raise ConfigError(f"{args.basic_auth_password_file} holds no password")
    return BasicAuth(args.basic_auth_user, password[0])


async def _serve(args: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    running = await start(args.data_dir, args.host, args.port, basic_auth=_basic_auth(args))
    try:
        await stopping.wait()
    finally:
        await running.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(
        os.environ.get("BIZEVENTS_LOG_LEVEL", "INFO"),
        "json" if os.environ.get("BIZEVENTS_LOG_FORMAT") == "json" else "auto",
    )
    try:
        asyncio.run(_serve(args))
    except BizeventsError as exc:
        log.error("registry.refused_to_start", reason=str(exc))
        return 2
    except OSError as exc:  # typically the port is taken
        log.error("registry.refused_to_start", reason=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
