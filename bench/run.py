"""`make bench`: run benchmarks 1-4, 6 and 7 (5, memory, is read during them); docs/benchmarks.md.

    python -m bench.run [--quick] [--only hooks,engine,waiting,start,fleet,inplace]

Figures are printed as they come and written, with their baselines, ratios and the
machine's core count, into docs/benchmarks.md (see bench/report.py). Sizes and durations
are in bench/env.py; BENCH_FULL=1 uses the issue's sizes and durations (ten minutes of
waiting, 1,000 engine workflows, 10 s per wrk level).
"""

from __future__ import annotations

import argparse
import os
import time

from bench import env

ALL = ("hooks", "engine", "waiting", "start", "fleet", "inplace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, short durations")
    parser.add_argument("--only", default=",".join(ALL), help="comma-separated benchmarks")
    parser.add_argument("--output", default=str(env.ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    env.setup_django()
    from bench import db, engine, fleet, hooks, inplace, report, start, waiting

    sizes = env.sizes(quick=args.quick)
    chosen = [b for b in args.only.split(",") if b]
    print(
        f"hooksvc benchmarks on {os.cpu_count()} cores "
        f"({'quick' if args.quick else 'default'} sizes)"
    )
    db.create_database()
    db.flush_redis()
    results: dict[str, object] = {}
    began = time.monotonic()
    if "hooks" in chosen:
        print("1. hook answers under load", flush=True)
        results["hooks"] = hooks.bench(sizes)
    if "engine" in chosen:
        print("2. engine throughput", flush=True)
        results["engine"] = engine.bench(sizes)
    if "waiting" in chosen:
        print("3. waiting at scale", flush=True)
        results["waiting"] = waiting.bench(sizes)
    if "start" in chosen:
        print("4. hook-to-start latency", flush=True)
        results["start"] = start.bench(sizes)
    if "fleet" in chosen:
        print("6. fleet lifecycle", flush=True)
        results["fleet"] = fleet.bench(sizes)
    if "inplace" in chosen:
        print("7. in-place and upgrade-plan answers", flush=True)
        results["inplace"] = inplace.bench()
    db.flush_redis()
    text = report.render(
        results, sizes=sizes, quick=args.quick, minutes=(time.monotonic() - began) / 60
    )
    with open(args.output, "w") as out:
        out.write(text)
    print(text)


if __name__ == "__main__":
    main()
