#!/usr/bin/env python3
"""Interleaved A/B timing of two bbv builds on the same commands (issue 54's "no measurable
slowdown" check: the folder commit against the build before it).

    tools/ab/interleaved.py BASE_BBV NEW_BBV INPUT [--rounds-regions 31] [--rounds-run 11]

Each binary needs the QEMU plugin beside it (copy the same libbbv_qemu*.so next to both, so
that only the host side differs). Runs in a scratch folder under the current one: records a
`bbv run` of gzip -9 on INPUT with an interval giving about 10,000 intervals, then times, in
alternating order, `bbv regions R`, `bbv collect` and `bbv run` of the same guest, each with
its own output, and prints the medians and their ratio.
"""
import argparse
import os
import statistics
import subprocess
import time

ENV = {"PATH": "/usr/bin:/bin"}


def timed(cmd, cwd):
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{cmd}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
    return took


def ab(name, make, rounds, cwd):
    times = {"a": [], "b": []}
    for i in range(rounds):
        for who in ("a", "b") if i % 2 == 0 else ("b", "a"):
            times[who].append(timed(make(who), cwd))
    a, b = statistics.median(times["a"]), statistics.median(times["b"])
    print(f"{name}: base {a:.4f} s, new {b:.4f} s, new/base {b / a:.3f} "
          f"(medians of {rounds}; fastest {min(times['a']):.4f} / {min(times['b']):.4f})", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("input")
    p.add_argument("--interval", default="480000")
    p.add_argument("--rounds-regions", type=int, default=31)
    p.add_argument("--rounds-run", type=int, default=11)
    a = p.parse_args()
    bins = {"a": os.path.abspath(a.base), "b": os.path.abspath(a.new)}
    work = os.path.abspath("ab-work")
    os.makedirs(work, exist_ok=True)
    guest = ["--", "/bin/gzip", "-9", "-c", os.path.abspath(a.input)]
    timed([bins["b"], "run", "--interval", a.interval, "--max-k", "10", "-o", "R"] + guest, work)
    ab("bbv regions R", lambda w: [bins[w], "regions", "R"], a.rounds_regions, work)
    ab("bbv collect", lambda w: [bins[w], "collect", "--bb-out-file", f"c-{w}.bb",
                                 "--pc-out-file", f"c-{w}.pc"] + guest, a.rounds_run, work)
    ab(f"bbv run --interval {a.interval}",
       lambda w: [bins[w], "run", "--interval", a.interval, "--max-k", "10", "-o", f"out-{w}"] + guest,
       a.rounds_run, work)


if __name__ == "__main__":
    main()
