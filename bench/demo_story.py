"""The demo's start-up and the story's length, as a new user meets them.

Runs ``bizevents demo --json`` (the story: orders@1 live, the fix pinned, the Spark
replay, agreement; or with ``--live-only`` the live flow for ``--duration`` seconds)
``--runs`` times, each on a fresh stack of its own in a temporary state folder, and
prints per run and as the median with its spread (min-max): the seconds until the
stack was ready, until the first business event after that (and since the demo
began: the figure an earlier start could not hide), of each story step, and of the
whole run; then the first event's ratio to the target (on screen within 3 s of the
stack being ready, issue 16).

    .venv/bin/python bench/demo_story.py                 # 3 runs, 15 s live steps
    .venv/bin/python bench/demo_story.py --runs 5 --step-seconds 5
    .venv/bin/python bench/demo_story.py --live-only     # 3 runs of 15 s
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

FIRST_EVENT_TARGET_S = 3.0


def one_run(step_seconds: float, live_only: bool, duration: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bizevents-bench-demo-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BIZEVENTS_")}
        env |= {
            "BIZEVENTS_STATE_DIR": str(Path(tmp) / "state"),
            "BIZEVENTS_DEV__BROKER_PORT": "0",
            "BIZEVENTS_DEV__REGISTRY_PORT": "0",
            "BIZEVENTS_DEV__POSTGRES_PORT": "0",
        }
        cli = [sys.executable, "-m", "bizevents"]
        mode = ["--live-only", "--duration", str(duration)] if live_only else []
        try:
            result = subprocess.run(
                [*cli, "demo", "--json", "--step-seconds", str(step_seconds), *mode],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        finally:
            subprocess.run([*cli, "dev", "down", "--purge"], env=env, capture_output=True)
    if result.returncode != 0:
        sys.exit(f"the demo failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    figures = {f"step {name}": float(s) for name, s in summary["steps"].items()}
    figures["first event after ready"] = float(summary["first_event_s"] or "nan")
    figures["first event after start"] = figures["step stack"] + figures["first event after ready"]
    figures["whole run"] = float(summary["seconds"])
    if not live_only:
        figures["agreement before replay %"] = float(summary["before_replay"] or 0)
        figures["agreement at the end %"] = float(summary["agreement"]["percent"])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=15.0)
    parser.add_argument("--live-only", action="store_true", help="the live flow, no story")
    parser.add_argument("--duration", type=float, default=15.0, help="with --live-only")
    args = parser.parse_args()
    runs = []
    for n in range(args.runs):
        figures = one_run(args.step_seconds, args.live_only, args.duration)
        runs.append(figures)
        print(f"run {n + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    print(f"median of {len(runs)} runs (min-max):")
    for key in runs[0]:
        values = [r[key] for r in runs]
        spread = f"({min(values):.1f}-{max(values):.1f})"
        print(f"  {key:<28} {statistics.median(values):7.1f}  {spread}")
    first = statistics.median(r["first event after ready"] for r in runs)
    print(
        f"first business event {first:.1f} s after the stack was ready: "
        f"{FIRST_EVENT_TARGET_S / first:.2f} of the target (within {FIRST_EVENT_TARGET_S:.0f} s)"
    )


if __name__ == "__main__":
    main()
