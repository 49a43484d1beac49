# bbv's guard script for Sniper: the simulator ends when run-sniper, its parent, ends.
#
# bbv starts run-sniper in a process group of its own that dies with bbv (the kernel kills
# run-sniper when bbv ends, even by SIGKILL), but run-sniper starts the simulator as a child
# that would outlive it, waiting forever on FIFOs nobody writes. Sniper runs this script in
# the simulator's own process at start-up, so the kernel kills the simulator in turn.
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1

libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
    print('[BBV] guard: prctl failed: %s' % os.strerror(ctypes.get_errno()), flush=True)
# run-sniper may have ended before the request (the simulator then belongs to whichever
# process adopted it): nobody would send the signal.
try:
    with open('/proc/%d/cmdline' % os.getppid(), 'rb') as f:
        adopted = b'run-sniper' not in f.read()
except OSError:
    adopted = True
if adopted:
    os._exit(1)
