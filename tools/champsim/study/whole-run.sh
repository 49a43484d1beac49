#!/usr/bin/env bash
# The whole run of a program simulated by ChampSim, for runs too long to simulate twice: the bbv
# plugin's records of every instruction (thread 1) piped into a ChampSim whose heartbeat comes
# every million instructions, its report kept (OUT/champsim.out) for `bbv bench band`.
#
#   BBV_CHAMPSIM_HEARTBEAT=1000000 scripts/champsim
#   tools/champsim/study/whole-run.sh OUT N PROG ARGS...   # N: the run's instructions
#                                                          # (bbv run's summary)
# CS: the ChampSim binary (default: the heartbeat build above); PLUGIN: the bbv plugin for the
# QEMU on PATH (default: target/release/libbbv_qemu.so, QEMU 6.0-8.2); the last 10,000
# instructions are left out, as bbv simulate --full does, so that ChampSim never reaches the end.
set -u
repo=$(cd "$(dirname "$0")/../../.." && pwd)
out=$1; n=$2; shift 2
CS=${CS:-${XDG_CACHE_HOME:-$HOME/.cache}/bbvkit/champsim-heartbeat-1000000/bin/champsim}
PLUGIN=${PLUGIN:-$repo/target/release/libbbv_qemu.so}
# The plugin refuses a folder holding an earlier run's tables: start from an empty one.
rm -rf "$out/plugin"; mkdir -p "$out/plugin"; rm -f "$out/rec"; mkfifo "$out/rec"
start=$(date +%s.%N)
# When QEMU or the plugin fails before opening the FIFO, ChampSim would wait on it forever: once
# QEMU is gone the subshell opens it once itself, which ends ChampSim's wait (harmless otherwise).
(
  nice -n 10 qemu-x86_64 -plugin "$PLUGIN,interval=2305843009213693951,count_only=on,record=$out/rec,dir=$out/plugin" -- "$@" > /dev/null 2> "$out/guest.err"
  [ -s "$out/plugin/error" ] && echo "whole-run.sh: the plugin failed: $(cat "$out/plugin/error")" >&2
  timeout 5 sh -c ': > "$1"' _ "$out/rec"
) &
q=$!
nice -n 10 "$CS" --warmup-instructions 0 --simulation-instructions $((n - 10000)) "$out/rec" > "$out/champsim.out" 2>&1
rc=$?
end=$(date +%s.%N)
kill $q 2>/dev/null; wait $q 2>/dev/null
echo "rc=$rc seconds=$(echo "$end - $start" | bc) n=$n cmd=$*" > "$out/done"
