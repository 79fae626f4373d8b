"""Apache Kafka's classpath for the dev stack, fetched once with Maven and kept.

``kafka/pom.xml`` beside this module pins the broker (``org.apache.kafka:kafka_2.13``)
and the log4j SLF4J bridge its POM leaves out. Maven fetches the jars into the user's
Maven repository and checks their checksums; the classpath it builds is kept in the
environment (``<sys.prefix>/share/bizevents/``) under the POM's hash, so a second
call, and a second ``scripts/setup``, runs no Maven at all while every jar is there.
Another POM's classpath is fetched and kept the same way (``pom``: bench/replay.py's
Spark Kafka source).

:func:`main` fetches it (``scripts/setup`` calls it; ``python -m`` would import the
module twice, through the package).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bizevents.devstack.processes import StackError

POM = Path(__file__).with_name("kafka") / "pom.xml"


def _cache_file(pom: Path) -> Path:
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    return Path(sys.prefix) / "share" / "bizevents" / f"{pom.parent.name}-{digest}.classpath"


def cached(pom: Path = POM) -> list[str] | None:
    """The kept classpath when every jar of it is still there, else ``None``."""
    try:
        jars = _cache_file(pom).read_text().split(os.pathsep)
    except OSError:
        return None
    if not jars or not all(jar.endswith(".jar") and Path(jar).is_file() for jar in jars):
        return None
    return jars


def classpath(pom: Path = POM) -> list[str]:
    """The broker's jars (``pom``'s): the kept classpath, or fetched with Maven now."""
    jars = cached(pom)
    if jars is not None:
        return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(
            "Apache Kafka is fetched with Maven, and `mvn` is not on the PATH; install it "
            "(`apt-get install maven`; in a source checkout, scripts/setup) or use "
            "--broker tansu"
        )
    target = _cache_file(pom)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bizevents-kafka-") as work:
        out = Path(work) / "classpath"
        result = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:build-classpath",
                f"-Dmdep.outputFile={out}",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not out.is_file():
            raise StackError(
                "Maven could not fetch the jars of "
                + str(pom)
                + ":\n"
                + (result.stdout + result.stderr)[-2000:]
            )
        text = out.read_text().strip()
    jars = text.split(os.pathsep)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    return jars


def main() -> int:
    fetched = cached() is None
    try:
        jars = classpath()
    except StackError as exc:
        print(f"kafkajars: {exc}", file=sys.stderr)
        return 1
    print(f"Apache Kafka: {len(jars)} jars {'fetched' if fetched else 'already there'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
