#!/usr/bin/env python3
"""Checks `bbv gpu run`'s counts of tools/cupti/kernels.cu against counts derived by hand.

usage: check_kernels.py RUN_DIR KERNELS_DATA

The SASS path of every lane follows from its data (kernels.data, written by the program) and the
kernels' blocks (`bbv gpu cfg` of the cubin nvcc 13.0 makes for sm_90, checked first against
RUN_DIR/blocks.tsv's sizes):
  trip_loop    lane i < n: 8 + 9 + 3 + 5 t + 1 + 2 + 1 + 5 = 29 + 5 t (t = data[i]); else 8
  uniform_loop lane i < n: 28 + 5 t (t = data[i >> 5], one per warp); else 8
  diverge      lane i < n: 8 + 12, + 4 more when data[i] is even; else 8
  caller       lane i < n: 8 + 7 + 2 + 4 + 1 + 4 = 26, + 3 + 5 j when j = i & 3 > 0; else 8
Thread level (every active lane, predicated-off ones included) is the sum over lanes whatever the
warp's scheduling. Warp level is analytic where a warp's lanes never wait for each other:
uniform_loop (28 + 5 t per warp with a lane below n, else 8) and diverge (predicated, no branch:
8, + 12 with a lane below n, + 4 more with such a lane even).
"""
import sys

SIZES = [32, 1000, 4096, 1 << 16]
LAUNCHES = [  # kernel, threads per block, in the program's order for each size
    ("_Z9trip_loopPKiPii", 128),
    ("_Z12uniform_loopPKiPii", 128),
    ("_Z7divergePKiPii", 256),
    ("_Z6callerPKiPii", 64),
]


def lane_path(kernel, i, n, data):
    if i >= n:
        return 8
    if kernel.startswith("_Z9trip"):
        return 29 + 5 * data[i]
    if kernel.startswith("_Z12uniform"):
        return 28 + 5 * data[i >> 5]
    if kernel.startswith("_Z7diverge"):
        return 20 + (4 if data[i] % 2 == 0 else 0)
    j = i & 3
    return 26 + (3 + 5 * j if j else 0)


def warp_path(kernel, lanes, n, data):
    active = [i for i in lanes if i < n]
    if not active:
        return 8
    if kernel.startswith("_Z12uniform"):
        return 28 + 5 * data[active[0] >> 5]
    if kernel.startswith("_Z7diverge"):
        return 20 + (4 if any(data[i] % 2 == 0 for i in active) else 0)
    return None


def expected(kernel, tpb, n, data):
    blocks = (n + tpb - 1) // tpb
    threads = sum(lane_path(kernel, i, n, data) for i in range(blocks * tpb))
    warps = [warp_path(kernel, range(w * 32, w * 32 + 32), n, data) for w in range(blocks * tpb // 32)]
    return threads, (None if None in warps else sum(warps))


def main():
    run, data_path = sys.argv[1], sys.argv[2]
    data = [int(x) for x in open(data_path)]
    rows = [l.rstrip("\n").split("\t") for l in open(f"{run}/launches.tsv")][1:]
    want = [(k, tpb, n) for n in SIZES for (k, tpb) in LAUNCHES]
    bad = 0
    if len(rows) != len(want):
        print(f"FAIL: {len(rows)} launches counted, {len(want)} made")
        return 1
    print("launch kernel n | warp measured expected | thread measured expected | verdict")
    for row, (k, tpb, n) in zip(rows, want):
        if row[1] != k:
            print(f"FAIL: launch {row[0]} is {row[1]}, expected {k}")
            bad += 1
            continue
        threads, warps = expected(k, tpb, n, data)
        w, t = int(row[4]), int(row[6])
        ok = t == threads and (warps is None or w == warps)
        bad += not ok
        print(f"{row[0]} {k} {n} | {w} {warps if warps is not None else '-'} | {t} {threads} | {'ok' if ok else 'MISMATCH'}")
    print(f"exactness: {len(rows) - bad} of {len(rows)} launches as derived")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
