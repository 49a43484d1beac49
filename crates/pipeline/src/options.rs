//! The options of the commands that run a guest, typed, and the rules of which go together:
//! `bbv collect` ([`CollectOptions`]) and `bbv run` ([`RunOptions`]), whether a person typed
//! them or a suite manifest named them. Each builds the collection request it stands for.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use bbv_collect::{CacheModel, Collected, Request};
use bbv_files::{interrupt, AtomicFiles};
use bbv_profile::CacheGeometry;

use crate::validate::Pick;
use crate::{PipelineError, RegionsMode, RunRequest};

type Result<T> = std::result::Result<T, PipelineError>;

/// How the guest's threads are scheduled (`bbv run --schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Deterministic turns for `--regions looppoint` where the QEMU allows them (9.1 and
    /// later), the host's schedule otherwise.
    Auto,
    /// Threads take turns in an order that depends only on the program.
    Deterministic,
    /// As the host runs them.
    Host,
}

fn invalid<T>(text: String) -> Result<T> {
    Err(PipelineError::Invalid(text))
}

/// The guest and how it runs: what `bbv collect` and `bbv run` share.
#[derive(Clone, Debug)]
pub struct GuestOptions {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// Which QEMU, plugin, CPU model and sysroot run it.
    pub launch: bbv_collect::Launch,
    /// Cut every interval at exactly its size, splitting a block (exp-bbv's rule).
    pub exact: bool,
    /// Also write the last, partial interval.
    pub tail: bool,
    /// Count a rep string instruction once per iteration (gem5's and Pin's rule) instead of
    /// once per instance (exp-bbv's).
    pub rep_iterations: bool,
    /// The metrics' L1 data cache.
    pub l1d: CacheGeometry,
    /// The metrics' L2 cache.
    pub l2: CacheGeometry,
    /// The metrics' cache model on a thread of its own.
    pub model_thread: bool,
    /// Benchmarks only: the metrics' callbacks return at once.
    pub metrics_calls_only: bool,
}

impl GuestOptions {
    /// The collection request, without metrics, markers or slices.
    fn request(&self, interval: u64, count_only: bool, work_dir: &Path) -> Result<Request> {
        check_count("--interval", interval)?;
        let guest = bbv_collect::Guest::from_command(&self.command, self.launch.clone())
            .map_err(PipelineError::Invalid)?;
        Ok(Request {
            guest,
            counting: bbv_collect::PluginConfig {
                interval,
                exact: self.exact,
                count_only,
                tail: self.tail,
                rep_iterations: self.rep_iterations,
                ..Default::default()
            },
            work_dir: work_dir.to_path_buf(),
        })
    }

    /// The metrics' cache model when metrics are asked for (`asked`, by the option `flag`);
    /// the cache options without them are a mistake worth reporting.
    fn cache_model(&self, asked: bool, flag: &str) -> Result<Option<CacheModel>> {
        let model = CacheModel {
            l1d: self.l1d,
            l2: self.l2,
            own_thread: self.model_thread,
            calls_only: self.metrics_calls_only,
            slice_rows: false,
        };
        if !asked {
            if model != CacheModel::default() {
                return invalid(format!(
                    "--l1d, --l2, --model-thread and --metrics-calls-only shape the metrics' cache model: they need {flag}"
                ));
            }
            return Ok(None);
        }
        if self.l1d.line != self.l2.line {
            return invalid(format!(
                "--l1d and --l2: the line sizes differ ({} and {} bytes); the model needs one line size",
                self.l1d.line, self.l2.line
            ));
        }
        Ok(Some(model))
    }
}

/// The folder a file is written in (`.` for a bare name).
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The most instructions an interval, a warmup or a flow quantum may hold: 2^62, well past
/// any real run (a century at a billion instructions a second), and far enough from 2^64
/// that sums of a few of them cannot overflow.
pub const MAX_INSTRUCTIONS: u64 = 1 << 62;

/// The largest `--max-k`: a million regions would be no sampling at all.
pub const MAX_K: usize = 1 << 20;

/// `--max-k` when not given: SimPoint 3.2's 30, or with `--target-error` 100, since a band
/// of a few percent on a program of many phases (a compiler) takes 40-50 points
/// (docs/champsim.md, "Choosing k by the predicted band") and every k tried costs only
/// clustering.
pub fn default_max_k(given: Option<usize>, target_error: bool) -> usize {
    given.unwrap_or(if target_error { 100 } else { 30 })
}

/// Refuses an instruction count beyond [`MAX_INSTRUCTIONS`].
fn check_count(option: &str, n: u64) -> Result<()> {
    if n > MAX_INSTRUCTIONS {
        return invalid(format!(
            "{option} {n}: at most {MAX_INSTRUCTIONS} (2^62) instructions"
        ));
    }
    Ok(())
}

/// Fails unless files can be created in `dir` (checked before the guest runs).
fn check_writable(dir: &Path) -> Result<()> {
    tempfile::Builder::new()
        .prefix(".bbv-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|source| PipelineError::Create {
            what: format!("cannot create files in {}", dir.display()),
            source,
        })
}

/// `bbv collect`: valgrind exp-bbv's files, named as exp-bbv names them (`%p`, `%q{VAR}`).
#[derive(Clone, Debug)]
pub struct CollectOptions {
    /// Vector file of thread 1 (thread N writes FILE.N).
    pub bb_out_file: String,
    /// PC file.
    pub pc_out_file: String,
    /// Block table.
    pub blocks_out_file: Option<String>,
    /// Instructions per interval.
    pub interval_size: u64,
    /// Per-interval metrics, as CSV.
    pub metrics_out_file: Option<String>,
    /// Only count instructions: no vector or PC files.
    pub instr_count_only: bool,
    /// The guest.
    pub guest: GuestOptions,
}

impl CollectOptions {
    /// Checks the options and that the files can be written, and builds the request.
    pub fn request(&self) -> Result<Request> {
        check_count("--interval-size", self.interval_size)?;
        bbv_collect::expand(&self.bb_out_file, None)?;
        bbv_collect::expand(&self.pc_out_file, None)?;
        if let Some(b) = &self.blocks_out_file {
            bbv_collect::expand(b, None)?;
            if !self.instr_count_only {
                check_writable(&dir_of(Path::new(b)))?;
            }
        }
        let bb_dir = dir_of(Path::new(&self.bb_out_file));
        if let Some(m) = &self.metrics_out_file {
            bbv_collect::expand(m, None)?;
            if self.instr_count_only {
                return invalid(
                    "--metrics-out-file needs the vectors' cuts: it cannot go with --instr-count-only"
                        .into(),
                );
            }
            check_writable(&dir_of(Path::new(m)))?;
        }
        let asked = self.metrics_out_file.is_some();
        let metrics = self.guest.cache_model(asked, "--metrics-out-file")?;
        if !self.instr_count_only {
            check_writable(&bb_dir)?;
            check_writable(&dir_of(Path::new(&self.pc_out_file)))?;
        }
        let work = if self.instr_count_only {
            std::env::temp_dir()
        } else {
            bb_dir
        };
        let mut req = (self.guest).request(self.interval_size, self.instr_count_only, &work)?;
        req.counting.metrics = metrics;
        Ok(req)
    }

    /// Puts a finished collection's files in place (the guest's pid `pid` fills `%p`): the
    /// vectors, the PC file, the block table and the metrics. Returns the files written.
    pub fn place(&self, c: &Collected, pid: u32) -> Result<Vec<PathBuf>> {
        let name = |f: &str| bbv_collect::expand(f, Some(pid)).map(PathBuf::from);
        let bb = name(&self.bb_out_file)?;
        let pc = name(&self.pc_out_file)?;
        let blocks = self.blocks_out_file.as_deref().map(name).transpose()?;
        let metrics = self.metrics_out_file.as_deref().map(name).transpose()?;
        let mut written = place_vectors(c, &bb, &pc, blocks.as_deref())?;
        if let (Some(path), Some(rows)) = (metrics, c.metrics_rows()?) {
            let mut files = AtomicFiles::default();
            files.write(&path, |w| crate::write_metrics(w, &rows))?;
            written.extend(files.commit()?);
        }
        Ok(written)
    }
}

/// Moves the vector files to their names and writes the PC file (and the block table).
fn place_vectors(
    c: &Collected,
    bb: &Path,
    pc: &Path,
    blocks: Option<&Path>,
) -> Result<Vec<PathBuf>> {
    let mut files = AtomicFiles::default();
    files.write(pc, |w| bbv_collect::write_pc(w, &c.blocks))?;
    if let Some(b) = blocks {
        files.write(b, |w| {
            bbv_collect::write_blocks_tsv(w, &c.blocks, &c.images)
        })?;
    }
    // The PC file and the vectors land together, even if bbv is killed now.
    let hold = interrupt::hold();
    let mut written = files.commit_held(&hold)?;
    for t in &c.threads {
        if let Some(src) = &t.bb {
            let dest = bbv_profile::thread_file(bb, t.number);
            bbv_files::move_file(src, &dest)?;
            written.push(dest);
        }
    }
    Ok(written)
}

/// `bbv run`: collect, cluster, place markers, write the hand-off files.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Instructions per interval.
    pub interval: u64,
    /// Largest k tried.
    pub max_k: usize,
    /// Try every k up to `max_k` with SimPoint's BIC rule, not its binary search.
    pub every_k: bool,
    /// The run directory.
    pub output: PathBuf,
    /// Measure per-interval metrics and how well the points estimate them.
    pub validate: bool,
    /// Choose k by the estimates' error (a fraction) instead of BIC; implies `validate`.
    pub target_error: Option<f64>,
    /// How each cluster's point is picked; any but [`Pick::Centroid`] implies `validate`.
    pub pick: Pick,
    /// Cluster every thread's intervals together instead of the main thread's.
    pub threads_all: bool,
    /// Warmup before each region, in instructions (None: one interval).
    pub warmup: Option<u64>,
    /// How regions are formed.
    pub regions: RegionsMode,
    /// Libraries whose instructions do not count toward slices (empty: the defaults).
    pub exclude_image: Vec<String>,
    /// Pace the threads (None: a twentieth of the interval).
    pub flow_quantum: Option<u64>,
    /// How the guest's threads are scheduled.
    pub schedule: Schedule,
    /// The guest.
    pub guest: GuestOptions,
}

impl RunOptions {
    /// Refuses options that do not go together (nothing is created).
    pub fn check(&self) -> Result<()> {
        self.metrics_model()?;
        self.check_threads()
    }

    /// `--max-k`'s range and the metrics' cache model (None without `--validate`).
    fn metrics_model(&self) -> Result<Option<CacheModel>> {
        if self.max_k == 0 {
            return invalid("--max-k must be at least 1".into());
        }
        if self.max_k > MAX_K {
            return invalid(format!(
                "--max-k {}: at most {MAX_K} (k is also limited to the intervals the run has)",
                self.max_k
            ));
        }
        check_count("--interval", self.interval)?;
        // A marker is placed within 0.5% of an interval after each cut: below this, that
        // window holds no instruction.
        let least = (1.0 / crate::markers::TOLERANCE).ceil() as u64;
        if self.interval < least {
            return invalid(format!(
                "--interval {}: at least {least} instructions for `bbv run` (each region's \
                 marker is placed within 0.5% of an interval after its cut); `bbv collect` cuts \
                 vectors of any size",
                self.interval
            ));
        }
        check_count("--warmup", self.warmup.unwrap_or(0))?;
        check_count("--flow-quantum", self.flow_quantum.unwrap_or(0))?;
        let validating =
            self.validate || self.target_error.is_some() || self.pick != Pick::Centroid;
        self.guest.cache_model(validating, "--validate")
    }

    fn check_threads(&self) -> Result<()> {
        if self.regions == RegionsMode::Looppoint && self.threads_all {
            return invalid("--regions looppoint already covers every thread; --threads all is for --regions intervals".into());
        }
        if self.flow_quantum.is_some()
            && (self.regions == RegionsMode::Intervals || self.threads_all)
        {
            return invalid("--flow-quantum paces the threads for multi-threaded regions: it needs --regions auto or looppoint (and --threads main)".into());
        }
        for e in &self.exclude_image {
            if e.is_empty() || e.contains([',', ':', '/']) {
                return invalid(format!("--exclude-image {e:?}: expected a library's file name or its prefix (libgomp), without ',', ':' or '/'"));
            }
        }
        Ok(())
    }

    /// Checks the options, makes the run directory and builds the pipeline's request.
    pub fn request(&self) -> Result<RunRequest> {
        let metrics = self.metrics_model()?;
        let created_out = !self.output.exists();
        std::fs::create_dir_all(&self.output).map_err(|source| PipelineError::Create {
            what: format!(
                "cannot create the output directory {}",
                self.output.display()
            ),
            source,
        })?;
        check_writable(&self.output)?;
        let mut collect = self.guest.request(self.interval, false, &self.output)?;
        collect.counting.metrics = metrics;
        // Markers must fall within 0.5% of an interval of each cut.
        collect.counting.watch = crate::markers::window(self.interval);
        self.check_threads()?;
        if let Some(m) = collect.counting.metrics.as_mut() {
            // Only an explicit looppoint knows before the run that slices will be clustered;
            // auto decides at the end, so its rows follow the main thread's intervals.
            m.slice_rows = self.regions == RegionsMode::Looppoint;
        }
        if self.regions != RegionsMode::Intervals && !self.threads_all {
            // Recorded whenever a second thread runs, so that auto can choose at the end.
            collect.counting.slices = self.interval;
            collect.counting.flow =
                (self.flow_quantum).unwrap_or_else(|| crate::flow_quantum(self.interval));
        }
        let quantum = (self.flow_quantum).unwrap_or(crate::TURN_QUANTUM);
        let deterministic = self.schedule == Schedule::Deterministic;
        if deterministic {
            // One thread at a time: turns replace the pacing.
            collect.counting.turns = quantum.max(1);
            collect.counting.flow = 0;
        }
        let auto_turns = self.schedule == Schedule::Auto && self.regions == RegionsMode::Looppoint;
        if (self.regions != RegionsMode::Intervals && !self.threads_all) || deterministic {
            collect.counting.exclude = if self.exclude_image.is_empty() {
                crate::DEFAULT_EXCLUDE.map(String::from).to_vec()
            } else {
                self.exclude_image.clone()
            };
        }
        Ok(RunRequest {
            collect,
            out: self.output.clone(),
            max_k: self.max_k,
            every_k: self.every_k,
            threads_all: self.threads_all,
            warmup: self.warmup,
            regions: if self.threads_all {
                RegionsMode::Intervals
            } else {
                self.regions
            },
            target_error: self.target_error,
            pick: self.pick,
            turns_if_possible: auto_turns.then_some(quantum.max(1)),
            created_out,
        })
    }

    /// The k values the clustering may try (for a progress display).
    pub fn k_choice(&self) -> bbv_simpoint::KChoice {
        if self.every_k || self.target_error.is_some() {
            bbv_simpoint::KChoice::List((1..=self.max_k).collect())
        } else {
            bbv_simpoint::KChoice::Search { max_k: self.max_k }
        }
    }
}
