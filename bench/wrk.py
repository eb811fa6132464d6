"""Driving the hook server with wrk: keep-alive connections, Lua scripts written per run.

wrk is a closed-loop generator: each connection sends its next request when the previous
answer arrives, so the offered load is set by the number of connections. The Lua `done`
hook prints one JSON line with the figures; everything else wrk prints is ignored.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from bench import env

_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "errors": %d, ' ..
    '"non_2xx": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""

_POST = r"""
local template = [==[%TEMPLATE%]==]
local clusters = %CLUSTERS%
local counter = 0
local threads = 0

function setup(thread)
  thread:set("offset", threads)
  threads = threads + 1
end

function init(args)
  -- Threads start far apart in the cluster list, so that they poll different clusters.
  counter = offset * 7919
end

function request()
  counter = counter + 1
  local i = counter % clusters
  local body = string.format(template, string.format("c%05d", i),
    string.format("00000000-0000-4000-8000-%012d", i))
  return wrk.format("POST", "%PATH%", {["Content-Type"] = "application/json"}, body)
end
"""


@dataclasses.dataclass(frozen=True)
class Result:
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    non_2xx: int


def post_script(name: str, *, template: str, path: str, clusters: int) -> Path:
    """A script POSTing `template` (a JSON body with two %s: cluster name and uid) in turn
    for clusters 0..clusters-1."""
    script = (
        _POST.replace("%TEMPLATE%", template)
        .replace("%CLUSTERS%", str(clusters))
        .replace("%PATH%", path)
        + _DONE
    )
    out = env.DATA_DIR / f"{name}.lua"
    out.write_text(script)
    return out


def get_script(name: str) -> Path:
    out = env.DATA_DIR / f"{name}.lua"
    out.write_text(_DONE)
    return out


def run(url: str, script: Path, *, connections: int, seconds: float) -> Result:
    threads = min(2, connections)
    proc = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH "))
    data = json.loads(line[len("BENCH ") :])
    return Result(
        connections=connections,
        rps=data["requests"] / (data["duration_us"] / 1e6),
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        errors=data["errors"],
        non_2xx=data["non_2xx"],
    )
