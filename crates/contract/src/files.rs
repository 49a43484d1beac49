//! The files the plugin writes into its directory (`dir=`), by name.

/// The block table: modules, then one line per block as it is first translated.
pub const BLOCKS: &str = "blocks";
/// The fast path's slot list (one line per translated block's slot).
pub const TBS: &str = "tbs";
/// The fast path's slot counts, a shared mapping (see [`crate::state`]).
pub const TBS_STATE: &str = "tbs.state";
/// Per-interval metrics rows (`metrics=on`).
pub const METRICS: &str = "metrics";
/// The global slice boundaries (`slices=N`, once a second thread runs).
pub const SLICES: &str = "slices";
/// One line per marker reached (`markers=FILE`, a replay).
pub const EVENTS: &str = "events";
/// Why the plugin failed, when it did.
pub const ERROR: &str = "error";
/// With `turns=Q`: what the run's order could not follow, one line per event.
pub const SCHEDULE: &str = "schedule";

/// Bytes the guest read from its stdin when that is not a regular file (`checkpoint=FILE`),
/// so that a checkpoint's stdin can return the same bytes.
pub const STDIN: &str = "stdin";

/// Thread 1's system calls among the marker events (`syscalls=on`, [`crate::syscalls`]).
pub const SYSCALLS: &str = "syscalls";

/// Each marker's guest address, `MARKER HEX` once it is first translated
/// (`checkpoint=FILE`: a checkpoint traps its end marker at that address).
pub const CHECKPOINT_MARKERS: &str = "checkpoint.markers";

/// The state of the process captured at marker event E (`checkpoint=FILE`).
pub fn checkpoint_state(event: u32) -> String {
    format!("checkpoint.{event}")
}

/// Its non-zero memory, the runs `checkpoint_state` lists (in the folder the capture list's
/// `memory DIR` line names, else the plugin's).
pub fn checkpoint_memory(event: u32) -> String {
    format!("checkpoint.{event}.mem")
}

/// Where the first kept page starts in a memory file: the page before it is a hole left for
/// the header of the checkpoint the file becomes, so that `bbv checkpoint` writes its ELF
/// around the pages instead of copying them.
pub const CHECKPOINT_MEMORY_START: u64 = 4096;

/// The bytes of the regular file open as descriptor `fd` at the capture.
pub fn checkpoint_file(event: u32, fd: i32) -> String {
    format!("checkpoint.{event}.fd{fd}")
}

/// Thread N's totals and unfinished interval, a shared mapping (see [`crate::state`]).
pub fn thread_state(number: u32) -> String {
    format!("thread.{number}.state")
}

/// Thread N's completed intervals in exp-bbv's format.
pub fn thread_bb(number: u32) -> String {
    format!("thread.{number}.bb")
}

/// Thread N's marker candidates after each cut (`watch=W`).
pub fn thread_marks(number: u32) -> String {
    format!("thread.{number}.marks")
}

/// Thread N's vector per slice (`slices=N`).
pub fn thread_slices(number: u32) -> String {
    format!("thread.{number}.slices")
}

/// The thread number of a [`thread_state`] file name.
pub fn state_thread(name: &str) -> Option<u32> {
    name.strip_prefix("thread.")?
        .strip_suffix(".state")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_numbers_come_back() {
        assert_eq!(state_thread(&thread_state(12)), Some(12));
        assert_eq!(state_thread(&thread_bb(12)), None);
        assert_eq!(state_thread("thread.x.state"), None);
    }
}
