//! The name of every file and folder of a run directory, spelled once (docs/run.md says what
//! each holds and which step writes it). A GPU sample folder (`bbv gpu sample`, `bbv gpu run`,
//! `bbv gpu simulate`) shares [`SUMMARY`], [`REPORT`] and [`SIMULATION`] and adds
//! [`GPU_WEIGHTS`].

/// The run's settings, totals and points.
pub const SUMMARY: &str = "summary.json";
/// The summary as `bbv run` printed it.
pub const SUMMARY_TXT: &str = "summary.txt";
/// Thread 1's vectors (thread N's: `bb.out.N`).
pub const BB: &str = "bb.out";
/// Thread 1's block addresses, exp-bbv's PC file.
pub const PC: &str = "pc.out";
/// Every thread's intervals, in thread order (`--threads all`).
pub const BB_ALL: &str = "bb.all";
/// LoopPoint's slices of all threads, as vectors.
pub const GLOBAL_BB: &str = "global.bb";
/// The slices' boundaries (looppoint mode).
pub const SLICES: &str = "slices.tsv";
/// The slice boundaries the plugin cut at, kept for `bbv regions` to build slices again.
pub const SLICE_CUTS: &str = "slices.cuts";
/// Per-interval metrics (`--validate`).
pub const METRICS: &str = "metrics.csv";
/// The block table.
pub const BLOCKS: &str = "blocks.tsv";
/// The mapped images.
pub const IMAGES: &str = "images.tsv";
/// The marker candidates of each cut.
pub const MARKS: &str = "marks.out";
/// The prefix of SimPoint's files (`simpoint.simpoints`, `.weights`, `.labels`).
pub const SIMPOINT: &str = "simpoint";
/// SimPoint's points.
pub const SIMPOINTS: &str = "simpoint.simpoints";
/// SimPoint's weights.
pub const WEIGHTS: &str = "simpoint.weights";
/// SimPoint's labels.
pub const LABELS: &str = "simpoint.labels";
/// Every k tried and its BIC.
pub const BIC: &str = "bic.csv";
/// The estimate errors of every k (`--validate`).
pub const VALIDATION: &str = "validation.json";
/// The regions, one row each.
pub const REGIONS_CSV: &str = "regions.csv";
/// The regions with their markers.
pub const REGIONS_JSON: &str = "regions.json";
/// Sniper's region arguments.
pub const SNIPER: &str = "regions.sniper.txt";
/// gem5's files.
pub const GEM5: &str = "gem5";
/// The HTML report.
pub const REPORT: &str = "report.html";
/// `bbv replay`'s check.
pub const REPLAY: &str = "replay.json";
/// `bbv trace`'s regions and their traces.
pub const TRACE: &str = "trace.json";
/// `bbv trace`'s default folder of traces.
pub const TRACES: &str = "traces";
/// `bbv simulate`'s figures.
pub const SIMULATION: &str = "simulation.json";
/// ChampSim's own output of every region.
pub const CHAMPSIM_LOG: &str = "champsim.log";
/// `bbv checkpoint`'s default folder.
pub const CHECKPOINTS: &str = "checkpoints";
/// The checkpoints' list, in their folder.
pub const CHECKPOINTS_JSON: &str = "checkpoints.json";
/// A GPU sample's picks: launch, kernel, weight.
pub const GPU_WEIGHTS: &str = "weights.csv";
