"""Spark for both replays: the session (a local one bound to loopback, with the JIT and
memory settings a short job wants), the accumulator of finished ranges' reports, and
the Python exception that failed a task, out of Spark's message."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from bizevents.replay.task import TaskReport

__all__ = [
    "DRIVER_ADDRESS",
    "JAVA_OPTION_KEYS",
    "LOCAL_JIT",
    "LOOPBACK",
    "Reports",
    "follow",
    "is_local",
    "local_jvm_conf",
    "loopback_conf",
    "spark_session",
    "task_error",
]


LOOPBACK = "127.0.0.1"
DRIVER_ADDRESS = ("spark.driver.host", "spark.driver.bindAddress")


def is_local(master: str | None) -> bool:
    """A local master (``None`` means ``local[*]`` here), as opposed to a cluster's."""
    return master is None or master == "local" or master.startswith("local[")


def loopback_conf(
    master: str | None, env: Mapping[str, str], user_conf: Mapping[str, str]
) -> dict[str, str]:
    """Keep a local driver on loopback, like every embedded service.

    Left alone Spark binds the driver to the first non-loopback interface it finds.
    A cluster's driver must be reachable from its executors, so a ``spark://`` (or
    any non-local) master is left to the user's settings. So is a driver address the
    user chose: ``SPARK_LOCAL_IP`` other than loopback, or either key of
    ``DRIVER_ADDRESS`` in ``user_conf`` (Spark's own settings: spark-defaults.conf,
    ``--conf`` in ``PYSPARK_SUBMIT_ARGS``).
    """
    if not is_local(master) or env.get("SPARK_LOCAL_IP", LOOPBACK) != LOOPBACK:
        return {}
    if any(key in user_conf for key in DRIVER_ADDRESS):
        return {}
    return dict.fromkeys(DRIVER_ADDRESS, LOOPBACK)


#: The JIT of a local driver whose JVM writes nothing itself: C1 only. Such a JVM
#: schedules Python tasks and passes their reports; C2's compiler threads took about
#: 0.8 s of CPU in each few-second replay, from the two cores the Python workers had.
LOCAL_JIT: Final = "-XX:TieredStopAtLevel=1"
#: Where a user gives the driver's Java options (then they are left alone).
JAVA_OPTION_KEYS: Final = (
    "spark.driver.defaultJavaOptions",
    "spark.driver.extraJavaOptions",
    "--driver-java-options",
)


def local_jvm_conf(master: str | None, env: Mapping[str, str], defaults: str) -> dict[str, str]:
    """The launch settings of a local driver's JVM: :data:`LOCAL_JIT`, unless the master
    is a cluster's or the user gave the driver Java options in ``PYSPARK_SUBMIT_ARGS``
    or in ``defaults`` (the text of spark-defaults.conf)."""
    if not is_local(master):
        return {}
    given = env.get("PYSPARK_SUBMIT_ARGS", "") + "\n" + defaults
    if any(key in given for key in JAVA_OPTION_KEYS):
        return {}
    return {"spark.driver.defaultJavaOptions": LOCAL_JIT}


def _spark_defaults(env: Mapping[str, str]) -> str:
    """The text of the spark-defaults.conf Spark would read, or ""."""
    folder = env.get("SPARK_CONF_DIR")
    if folder is None:
        import pyspark

        home = env.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        folder = os.path.join(home, "conf")
    try:
        return Path(folder, "spark-defaults.conf").read_text(errors="replace")
    except OSError:
        return ""


def _user_spark_conf(launch: Mapping[str, str]) -> dict[str, str]:
    """Spark's settings as the user gave them to Spark (spark-defaults.conf, ``--conf``),
    launching the JVM with ``launch`` if it is not running yet."""
    from pyspark import SparkConf, SparkContext

    # launches the JVM, which is what loads them
    SparkContext._ensure_initialized(
        conf=SparkConf(loadDefaults=False).setAll(list(launch.items())) if launch else None
    )
    return dict(SparkConf().getAll())


def spark_session(
    master: str | None, app_name: str = "bizevents-replay", *, jvm_writes: bool = False
) -> Any:
    """The running session (tests, spark-submit) or a new one (``--master``, else local[*]).

    ``jvm_writes``: the JVM writes the output itself (Parquet), so a local JVM this
    launches keeps its full JIT (else :func:`local_jvm_conf`)."""
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if existing is not None and master is None:
        return existing
    builder = SparkSession.builder.appName(app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver
    if master is not None:
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[*]")
    if not submitted:
        # PySpark starts its workers with PYSPARK_PYTHON, else whatever "python3" is on
        # PATH: not necessarily the environment bizevents and the plugins live in.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if is_local(master):
            # Read by the JVM at its launch, for what the driver settings do not cover
            # (the web UI binds to it, else to every interface).
            os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
            launch = (
                {}
                if jvm_writes
                else local_jvm_conf(master, os.environ, _spark_defaults(os.environ))
            )
            user_conf = _user_spark_conf(launch)
            for key, value in loopback_conf(master, os.environ, user_conf).items():
                builder = builder.config(key, value)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$", re.MULTILINE)


def task_error(exc: BaseException) -> str:
    """The Python exception that failed a Spark task, out of Spark's long message."""
    text = str(exc)
    found = [m for m in _PY_ERROR.finditer(text) if not m.group(1).startswith(("org.", "java."))]
    if found:
        last = found[-1]
        return f"{last.group(1).rsplit('.', 1)[-1]}: {last.group(2).strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


class Reports:
    """An accumulator of finished ranges' reports (a list, added to as tasks succeed);
    pyspark's ``AccumulatorParam`` by its two methods, so this module imports without
    pyspark."""

    def zero(self, value: list[TaskReport]) -> list[TaskReport]:
        return []

    def addInPlace(self, value1: list[TaskReport], value2: list[TaskReport]) -> list[TaskReport]:
        value1.extend(value2)
        return value1


def follow(action: Callable[[], Any], finished: Any, take: Callable[[TaskReport], None]) -> Any:
    """Run the Spark ``action`` in a thread while this one hands each report the
    accumulator ``finished`` gains to ``take``, once (a retried or speculated task
    reports again); the action's result, or its error raised here."""
    outcome: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # handed to the driver's thread, raised there
            failed.append(exc)

    thread = threading.Thread(target=run, name="replay-job", daemon=True)
    thread.start()
    seen: set[str] = set()

    def record() -> None:
        for report in list(finished.value):
            if report.range_id not in seen:
                seen.add(report.range_id)
                take(report)

    while thread.is_alive():
        thread.join(0.2)
        record()
    record()
    if failed:
        raise failed[0]
    return outcome[0]
