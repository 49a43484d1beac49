#!/usr/bin/env python3
"""Where the error of `bbv simulate` comes from: SimPoint's choice or the regions' warmup.

    BBV_CHAMPSIM_HEARTBEAT=100000 scripts/champsim       # prints the diagnostic build's folder
    bbv simulate DIR --champsim FOLDER/champsim --full -- PROG ARGS
    tools/champsim/intervals.py DIR

The whole run's ChampSim report (`DIR/champsim.log`, section "the whole run") then holds a
heartbeat line every 100,000 instructions: cumulative instructions and cycles. From them each
interval's CPI *in context* (simulated as part of the whole run, caches and predictors as the
run left them). Printed per cluster: its representative's CPI in context, the cluster's mean,
least and most, and the CPI ChampSim measured for the region traced alone after its warmup.

* selection error: the estimate with every representative's in-context CPI against the whole
  run's CPI (what perfectly warmed regions would give);
* warmup error: the region simulated alone against the same interval in context.
"""

import bisect
import json
import re
import sys
from pathlib import Path


def fail(msg):
    print(f"intervals.py: {msg}", file=sys.stderr)
    sys.exit(2)


def boundaries(bb_out):
    """Cumulative instructions at each interval boundary of exp-bbv's vector file."""
    b = [0]
    with open(bb_out) as f:
        for line in f:
            if line.startswith("T"):
                total = 0
                for tok in line.split():
                    parts = tok.split(":")
                    if len(parts) == 3:
                        total += int(parts[2])
                b.append(b[-1] + total)
    return b


def heartbeats(log):
    text = Path(log).read_text()
    at = text.find("=== the whole run")
    if at < 0:
        fail(f"{log}: no whole run (run bbv simulate with --full)")
    points = [(0, 0)]
    for m in re.finditer(r"Heartbeat CPU 0 instructions: (\d+) cycles: (\d+)", text[at:]):
        points.append((int(m[1]), int(m[2])))
    if len(points) < 3:
        fail(f"{log}: fewer than two heartbeats in the whole run (a build from "
             "BBV_CHAMPSIM_HEARTBEAT=100000 scripts/champsim prints one per 100,000 instructions)")
    return points


def main():
    if len(sys.argv) != 2:
        fail("usage: intervals.py RUNDIR")
    d = Path(sys.argv[1])
    summary = json.loads((d / "summary.json").read_text())
    if summary.get("regions_mode") != "intervals":
        fail("only runs whose regions are intervals (not LoopPoint slices)")
    sim = json.loads((d / "simulation.json").read_text())
    b = boundaries(d / "bb.out")
    hb = heartbeats(d / "champsim.log")
    period = hb[2][0] - hb[1][0]
    if period * 2 > summary["interval"]:
        fail(f"heartbeats every {period} instructions: too coarse for intervals of "
             f"{summary['interval']}")
    xs = [p[0] for p in hb]

    def cycles_at(x):
        i = bisect.bisect_left(xs, x)
        if i >= len(xs):
            return None
        (x0, c0), (x1, c1) = hb[max(i - 1, 0)], hb[i]
        return c1 if x1 == x0 else c0 + (c1 - c0) * (x - x0) / (x1 - x0)

    cpi = []
    for i in range(len(b) - 1):
        c0, c1 = cycles_at(b[i]), cycles_at(b[i + 1])
        cpi.append(None if c1 is None else (c1 - c0) / (b[i + 1] - b[i]))
    labels = [int(line.split()[0]) for line in open(d / "simpoint.labels")]
    reps = {}
    for line in open(d / "simpoint.simpoints"):
        interval, cluster = map(int, line.split())
        reps[cluster] = interval
    full = sim["full_cpi"]
    print(f"{d}: {len(cpi)} intervals of {summary['interval']}, warmup {summary.get('warmup')}, "
          f"k = {len(reps)}; whole run CPI {full:.4f}")
    print("cluster  weight  interval  in context  cluster mean (least-most)  alone  warmup error")
    oracle_c = oracle_n = 0.0
    for r in sorted(sim["regions"], key=lambda r: -r["weight"]):
        cluster = r["id"] - 1
        rep = reps[cluster]
        members = [cpi[i] for i, l in enumerate(labels) if l == cluster and cpi[i] is not None]
        alone = r["cycles"] / r["instructions"]
        ctx = cpi[rep]
        if ctx is None:
            fail(f"interval {rep} lies past the whole run's last heartbeat")
        n = b[rep + 1] - b[rep]
        oracle_c += r["multiplier"] * ctx * n
        oracle_n += r["multiplier"] * n
        mean = sum(members) / len(members)
        print(f"{cluster:7}  {r['weight']:.4f}  {rep:8}  {ctx:10.4f}  {mean:.4f} "
              f"({min(members):.4f}-{max(members):.4f})  {alone:.4f}  {100 * (alone - ctx) / ctx:+.1f}%")
    oracle = oracle_c / oracle_n
    print(f"selection error (representatives in context): {oracle:.4f}, "
          f"{100 * (oracle - full) / full:+.2f}%")
    print(f"estimate of bbv simulate (regions alone):     {sim['estimate_cpi']:.4f}, "
          f"{sim['error_pct']:+.2f}%")


if __name__ == "__main__":
    main()
