//! Layout of the files the QEMU plugin (bbv-qemu) keeps while a guest runs and `bbv collect`
//! (bbv-collect) reads afterwards, also when the guest died without warning. Native-endian u64
//! words: a header of [`HEADER_WORDS`], then the payload.
//!
//! * `thread.N.state` ([`crate::files::thread_state`]): header (word indices in [`thread`]), then one count per block id of the
//!   thread's unfinished interval.
//! * `tbs.state`: header (word 0 = [`SLOTS_MAGIC`]), then `[executions, harvested]` per slot
//!   listed in `tbs`.

/// Words before the payload of either file.
pub const HEADER_WORDS: usize = 16;
/// First word of a `thread.N.state` file ("bstatev1").
pub const THREAD_MAGIC: u64 = 0x3176_6574_6174_7362;
/// First word of `tbs.state` ("btbsstv1").
pub const SLOTS_MAGIC: u64 = 0x3176_7374_6273_7462;

/// Word indices in a thread state header.
pub mod thread {
    /// [`super::THREAD_MAGIC`].
    pub const MAGIC: usize = 0;
    /// The thread's number (1 = main thread).
    pub const NUMBER: usize = 1;
    /// Instructions executed (without what the single-thread fast path has not harvested).
    pub const TOTAL: usize = 2;
    /// Executions of rep string instructions (exp-bbv's "Total reps").
    pub const REP_ITERATIONS: usize = 3;
    /// Executed rep instances (exp-bbv's "Unique reps").
    pub const REP_INSTANCES: usize = 4;
    /// fldcw instructions executed.
    pub const FLDCW: usize = 5;
    /// Vectors written to the thread's `.bb` file.
    pub const INTERVALS: usize = 6;
    /// Counts that follow the header.
    pub const CAPACITY: usize = 7;
}
