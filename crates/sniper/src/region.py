# bbv's region script for Sniper: a multi-threaded region bounded by its markers' executions
# counted in Sniper's simulated order (as LoopPoint bounds its regions), not in the order
# QEMU's turns ran them. crates/sniper writes it next to the region's Sniper and names it with
# `-s`; its arguments are bbv_sift::command::region's numbers and the two snapshot names.
#
# The frontend sends, as user commands on the thread that runs them, how many executions of
# the start and end markers are left from the window's opening to the region's bounds, then
# one command per execution. Sniper runs each as it simulates the thread that sent it, so the
# counts follow simulated time. At each bound the statistics are recorded; at the end Sniper
# ends (the frontend's streams then stop on their own).

# Sniper's built-in modules (its `sim` package lives in its own scripts folder, not here).
import sys

import sim_control
import sim_hooks
import sim_stats


class BbvRegion:
    def __init__(self, args):
        a = args.split(':')
        nums = [int(x, 0) for x in a[:5]]
        (self.start_after, self.end_after, self.hit, self.hit_start, self.hit_end) = nums
        self.start_name, self.end_name = a[5], a[6]
        self.start_left = None
        self.end_left = None
        self.started = False
        self.ended = False

    def start(self):
        if not self.started and not self.ended:
            self.started = True
            sim_stats.write(self.start_name)
            # bbv reads its log for which bounds were reached.
            print('[BBV] %s' % self.start_name, flush=True)

    def end(self):
        if not self.ended:
            # An end before the start leaves the start's snapshot missing: bbv says so.
            self.ended = True
            sim_stats.write(self.end_name)
            print('[BBV] %s' % self.end_name, flush=True)
            # Nothing after the end is measured: Sniper ends here (its own way out of a
            # hook) instead of reading what the frontend streamed past it.
            sim_control.abort()

    def hook_magic_user(self, thread, core, a, b, s):
        if a == self.start_after:
            self.start_left = b
            if b == 0:
                self.start()
        elif a == self.end_after:
            self.end_left = b
            if b == 0:
                self.end()
        elif a == self.hit:
            if b & self.hit_start and self.start_left is not None and self.start_left > 0:
                self.start_left -= 1
                if self.start_left == 0:
                    self.start()
            if b & self.hit_end and self.end_left is not None and self.end_left > 0:
                self.end_left -= 1
                if self.end_left == 0:
                    self.end()
        else:
            return None
        return 0


sim_hooks.register(sim_hooks.hooks['HOOK_MAGIC_USER'], BbvRegion(sys.argv[1]).hook_magic_user)
