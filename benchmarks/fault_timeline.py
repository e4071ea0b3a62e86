"""How fast a run notices and recovers from injected faults.

Runs an `rltrain` command (with `faults.events` set), stamps every line it prints with the
time it arrived, and reports, for each injected kill, the seconds until the driver said the
process was lost, until it was back (or the shard restored), and the updates a shard restore
lost.

    python benchmarks/fault_timeline.py -- rltrain bench configs/bench_fashion_mnist.yaml \\
        --set workers=3 --set "modes=[sync]" --set budget.max_seconds=30 \\
        --set "faults.events=[{action: kill, target: worker, index: 1, at: 5}]"
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

KILLED = re.compile(r"injected fault: kill (\w+) (\d+)")
LOST = re.compile(r"(\w+) (\d+) lost")
BACK = re.compile(r"(\w+) (\d+) is back")
RESTORED = re.compile(r"server shard\(s\) \[([\d, ]+)\] lost; .* (\d+) updates lost")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the rltrain command, after --")
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    if not command:
        parser.error("give the command to run after --")
    t0 = time.time()
    proc = subprocess.Popen(command, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True)
    kills: dict[tuple[str, str], float] = {}
    rows: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.time() - t0
        sys.stdout.write(f"{now:7.2f}s  {line}")
        if m := KILLED.search(line):
            kills[(m[1], m[2])] = now
            continue
        for pattern, what in ((LOST, "noticed"), (BACK, "back")):
            if (m := pattern.search(line)) and (who := (m[1], m[2])) in kills:
                rows.append(f"{m[1]} {m[2]}: {what} {now - kills[who]:.2f}s after the kill")
        if m := RESTORED.search(line):
            for shard in m[1].split(","):
                key = ("shard", shard.strip())
                if key in kills:
                    rows.append(
                        f"shard {key[1]}: restored {now - kills[key]:.2f}s after the kill, "
                        f"{m[2]} updates lost"
                    )
    proc.wait()
    print("\n".join(["", "fault timeline:", *rows] if rows else ["", "no injected kills seen"]))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
