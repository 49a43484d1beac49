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

    tools/champsim/intervals.py --all-k target/release/bbv DIR

prints instead the selection error of every k from 1 to 30 (the run's vectors clustered again
by `bbv simpoint`), with each cluster's point picked as SimPoint does (centroid), as
`bbv run --pick metrics` does, and with the clusters cut as `bbv run --pick strata` cuts them
(the run needs metrics.csv: `--validate`): one k's error is partly luck, the mean over k says
how good a way of picking is.
"""

import bisect
import csv
import json
import re
import subprocess
import sys
import tempfile
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


def interval_cpis(d, summary):
    """Each interval's CPI in context (None past the last heartbeat)."""
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
    return b, cpi


def per_run(d, summary, sim, b, cpi):
    """The run's own points: per cluster, in context against alone."""
    labels = [int(line.split()[0]) for line in open(d / "simpoint.labels")]
    reps = {}
    for line in open(d / "simpoint.simpoints"):
        interval, cluster = map(int, line.split())
        reps[cluster] = interval
    full = sim.get("full_cpi")
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


def typical(rows, labels, reps):
    """bbv run --pick metrics' choice (docs/run.md), from metrics.csv's rows."""
    names = ["l2_misses", "branch_mispredicts"]
    insns = [int(r["instructions"]) for r in rows]
    rate = {m: [int(r[m]) / n for r, n in zip(rows, insns)] for m in names}
    full = {m: sum(int(r[m]) for r in rows) / sum(insns) for m in names}
    out = {}
    for c, p in reps.items():
        members = [i for i, l in enumerate(labels) if l == c]
        mean = {m: sum(rate[m][i] for i in members) / len(members) for m in names}

        def score(i):
            return sum(((rate[m][i] - mean[m]) / full[m]) ** 2 for m in names if full[m] > 0)

        best = p
        for i in members:
            if score(i) < score(best) * (1 - 1e-12):
                best = i
        out[c] = best
    return out


def cpi_estimate(r):
    """The first-order CPI estimate of `bbv run --pick strata` (crates/rundir/src/strata.rs)."""
    n = int(r["instructions"])
    if n == 0:
        return 0.5
    return 0.5 + (10 * int(r["l1d_misses"]) + 70 * int(r["l2_misses"])
                  + 16 * int(r["branch_mispredicts"])) / n


def strata(rows, labels, reps):
    """`bbv run --pick strata`'s strata and points: [(members, point)]."""
    est = [cpi_estimate(r) for r in rows]
    w = [int(r["instructions"]) for r in rows]

    def mean(m):
        tw = sum(w[i] for i in m)
        return sum(w[i] * est[i] for i in m) / tw if tw else sum(est[i] for i in m) / len(m)

    def sse(m):
        mu = mean(m)
        return sum(w[i] * (est[i] - mu) ** 2 for i in m)

    def cut(m):
        tw = sum(w[i] for i in m)
        mu = mean(m)
        if len(m) < 2 or mu <= 0 or (sse(m) / tw) ** 0.5 / mu <= 0.15:
            return [sorted(m)]
        s = sorted(m, key=lambda i: (est[i], i))
        at = min(range(1, len(s)), key=lambda c: sse(s[:c]) + sse(s[c:]))
        return cut(s[:at]) + cut(s[at:])

    out = []
    for c in reps:
        members = [i for i, l in enumerate(labels) if l == c]
        for m in cut(members):
            mu = mean(m)
            out.append((m, min(m, key=lambda i: (abs(est[i] - mu), i))))
    return out


def all_k(d, bbv, max_k, cpi, full):
    """The selection error of every k from 1 to max_k, both picks, from the run's vectors."""
    rows = list(csv.DictReader(open(d / "metrics.csv")))
    if len(rows) != len(cpi):
        fail(f"{d}/metrics.csv has {len(rows)} rows for {len(cpi)} intervals")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([bbv, "simpoint", str(d / "bb.out"), "-k", f"1:{max_k}", "--save-all",
                        "-o", f"{tmp}/p"], check=True, stdout=subprocess.DEVNULL)
        runs = []
        for k in range(1, max_k + 1):
            def read(ext):
                (path,) = Path(tmp).glob(f"p.{ext}.run_*_k_{k}")
                return [line.split() for line in open(path)]
            labels = [int(x[0]) for x in read("labels")]
            reps = {int(c): int(i) for i, c in read("simpoints")}
            runs.append((k, labels, reps))

    def estimate(labels, reps):
        # Weights as SimPoint's (intervals per cluster); a point past the last heartbeat
        # (the run's short last interval) reads its neighbour's CPI.
        total = sum(labels.count(c) * (cpi[i] if cpi[i] is not None else cpi[i - 1])
                    for c, i in reps.items())
        return 100 * (total / sum(labels.count(c) for c in reps) - full) / full

    def stratified(parts):
        # Weights by instructions within a cluster, as bbv's; intervals are of equal length
        # but the last, so by members here.
        at = lambda i: cpi[i] if cpi[i] is not None else cpi[i - 1]
        total = sum(len(m) * at(p) for m, p in parts)
        return 100 * (total / sum(len(m) for m, _ in parts) - full) / full

    print("k  points  centroid  metrics   strata (points)   "
          "(selection error: representatives in context)")
    sums = [0.0, 0.0, 0.0]
    points = 0
    for k, labels, reps in runs:
        parts = strata(rows, labels, reps)
        e = [estimate(labels, reps), estimate(labels, typical(rows, labels, reps)),
             stratified(parts)]
        sums = [a + abs(x) for a, x in zip(sums, e)]
        points += len(parts)
        print(f"{k:2} {len(reps):6}  {e[0]:+7.2f}%  {e[1]:+7.2f}%  {e[2]:+7.2f}% ({len(parts)})")
    n = len(runs)
    print(f"mean |error| over k = 1..{max_k}: centroid {sums[0] / n:.2f}%, "
          f"metrics {sums[1] / n:.2f}%, strata {sums[2] / n:.2f}% "
          f"({points / n:.1f} points on average)")


def main():
    args = sys.argv[1:]
    bbv = None
    if len(args) == 3 and args[0] == "--all-k":
        bbv, args = args[1], args[2:]
    if len(args) != 1:
        fail("usage: intervals.py [--all-k BBV] RUNDIR")
    d = Path(args[0])
    summary = json.loads((d / "summary.json").read_text())
    if summary.get("regions_mode") != "intervals":
        fail("only runs whose regions are intervals (not LoopPoint slices)")
    sim = json.loads((d / "simulation.json").read_text())
    b, cpi = interval_cpis(d, summary)
    if bbv:
        all_k(d, bbv, min(30, len(cpi)), cpi, sim["full_cpi"])
    else:
        per_run(d, summary, sim, b, cpi)


if __name__ == "__main__":
    main()
