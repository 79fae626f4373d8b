"""The benches' shared kit (bench/kit.py)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.kit import holds_a_share


def _log(tmp_path: Path, *owned: list[int]) -> Path:
    lines = [json.dumps({"event": "metrics endpoint", "url": "http://x"})]
    lines += [json.dumps({"event": "assembling", "partitions": o}) for o in owned]
    log = tmp_path / "translate-0.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_a_worker_holds_a_share_by_its_last_assembling_line(tmp_path: Path) -> None:
    """Only the last ``assembling`` line counts: a member that gave all away holds none."""
    assert holds_a_share(_log(tmp_path, [0, 1, 2, 3], [2, 3]))
    assert not holds_a_share(_log(tmp_path, [0, 1, 2, 3], []))
    assert not holds_a_share(_log(tmp_path))
