//! SimPoint 3.2-compatible clustering of basic-block vectors.
//!
//! Written from a description of SimPoint 3.2's behaviour (never from its code): the same
//! generator, seeds, projection, weighted k-means, BIC, k search and output files, so that every
//! file SimPoint writes comes out byte for byte the same, only faster.
//!
//! # Design constraints
//! * Floating-point sums run in SimPoint's order; speed comes from exact pruning (Hamerly bounds),
//!   running independent seed trials (and the first three k values of a search) in parallel, and
//!   one streaming pass over the input.
//! * Only projected vectors are kept in memory when projecting.

// Index loops spell out the summation order SimPoint's results depend on.
#![allow(clippy::needless_range_loop)]

pub mod cfmt;
mod dataset;
pub mod driver;
mod kmeans;
mod load;
mod output;
mod rng;
mod sample;

use std::path::PathBuf;

use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use dataset::Dataset;
pub use kmeans::{bic, distance_error, label_all, lloyd, Distinct};
pub use load::{load_file, load_vectors, Loaded, Projection};
pub use output::{largest_clusters, PostResult};
pub use rng::Random;
pub use sample::sample_rows;

/// Errors of clustering and of its input and output files.
#[derive(Debug, thiserror::Error)]
pub enum SimpointError {
    /// The BBV file could not be read or parsed.
    #[error(transparent)]
    Profile(#[from] bbv_profile::ProfileError),
    /// Another file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A dataset, weight or matrix file is malformed.
    #[error("{path}:{line}: {message}")]
    Format {
        /// File concerned.
        path: PathBuf,
        /// 1-based line (0 for binary files).
        line: u64,
        /// What was wrong.
        message: String,
    },
    /// The input holds no vector.
    #[error("{0}: no frequency vectors ('T' lines) in the file")]
    NoVectors(PathBuf),
    /// A vector whose counts sum to zero cannot be normalised.
    #[error("{path}:{line}: vector with a total count of 0 cannot be normalised")]
    ZeroVector {
        /// File concerned.
        path: PathBuf,
        /// 1-based line.
        line: u64,
    },
    /// Options or inputs that contradict each other.
    #[error("{0}")]
    Invalid(String),
    /// A k larger than the vectors clustered (the driver names the file).
    #[error("k = {k} is larger than the number of vectors ({n}): {}", if *search {
        format!("give --max-k (SimPoint's -maxK) {n} or less; its default is 30")
    } else {
        format!("give -k values of {n} or less")
    })]
    TooFewVectors {
        /// The k asked for.
        k: usize,
        /// The vectors.
        n: usize,
        /// Whether k was the search's limit (`--max-k`) rather than a listed k.
        search: bool,
    },
    /// An error about the vectors of a file, named.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The vectors' file.
        path: PathBuf,
        /// The error.
        source: Box<SimpointError>,
    },
    /// The outputs could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
}

/// Which k values to try.
#[derive(Clone, Debug, PartialEq)]
pub enum KChoice {
    /// SimPoint's binary search up to `max_k` (`-k search -maxK`).
    Search {
        /// Largest k.
        max_k: usize,
    },
    /// Explicit k values, run in this order.
    List(Vec<usize>),
}

impl KChoice {
    /// Most k-means runs this choice can take (the search: 1, `max_k` and the midpoints of
    /// a binary search between them).
    pub fn max_runs(&self) -> usize {
        match self {
            KChoice::Search { max_k } => 3 + (*max_k as f64).log2().floor().max(0.0) as usize,
            KChoice::List(l) => l.len(),
        }
    }
}

/// k-means initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// k random rows, with replacement (`-initkm samp`).
    Sample,
    /// Furthest-first (`-initkm ff`).
    FurthestFirst,
}

/// Clustering options (SimPoint's defaults in [`Options::default`]).
#[derive(Clone, Debug)]
pub struct Options {
    /// k values.
    pub k: KChoice,
    /// Maximum k-means passes (`-iters`; `off` is `i32::MAX`).
    pub max_iter: usize,
    /// Seed trials per k (`-numInitSeeds`).
    pub num_init_seeds: usize,
    /// BIC threshold for the pick (`-bicThreshold`).
    pub bic_threshold: f64,
    /// Initialisation.
    pub init: Init,
    /// `-seedkm`.
    pub seed_km: i32,
    /// `-seedsample`.
    pub seed_sample: i32,
    /// `-sampleSize`: cluster a weighted sample of this many rows.
    pub sample_size: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            k: KChoice::Search { max_k: 0 },
            max_iter: 100,
            num_init_seeds: 5,
            bic_threshold: 0.9,
            init: Init::Sample,
            seed_km: 493_575_226,
            seed_sample: 385_089_224,
            sample_size: None,
        }
    }
}

/// Default `-seedproj`.
pub const DEFAULT_SEED_PROJ: i32 = 2_042_712_918;
/// Default `-dim`.
pub const DEFAULT_DIM: usize = 15;

/// The vectors of `path` as SimPoint 3.2 clusters them by default: projected to
/// [`DEFAULT_DIM`] dimensions with [`DEFAULT_SEED_PROJ`].
pub fn load_projected(path: &std::path::Path) -> Result<Dataset, SimpointError> {
    let projection = Projection::Random {
        dim: DEFAULT_DIM,
        seed: i64::from(DEFAULT_SEED_PROJ),
    };
    Ok(load_file(path, &projection, |_| {})?.vectors)
}

/// One seed trial of one run.
#[derive(Clone, Debug)]
pub struct Trial {
    /// Seed value SimPoint prints for this trial.
    pub logged_seed: i64,
    /// Iterations as SimPoint logs them.
    pub iterations: usize,
    /// BIC of the trial.
    pub bic: f64,
    /// Weighted distortion of the whole dataset.
    pub distortion: f64,
}

/// The best trial of one k.
#[derive(Clone, Debug)]
pub struct Run {
    /// k of this run.
    pub k: usize,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
    /// Index of the best trial (highest BIC, first wins).
    pub best_trial: usize,
    /// BIC of the best trial.
    pub bic: f64,
    /// Initial centres of the best trial (weights: initial centre weights when computed).
    pub initial_centres: Dataset,
    /// Final centres of the best trial.
    pub centres: Dataset,
}

/// All runs and the one picked.
#[derive(Clone, Debug)]
pub struct Clustering {
    /// Runs in the order they ran.
    pub runs: Vec<Run>,
    /// Index into `runs` of the pick.
    pub best: usize,
}

/// Progress and log events; every method has a no-op default.
pub trait Observer: Sync {
    /// A run starts (k search runs are announced as they are decided).
    fn run_started(&self, _run: usize, _k: usize) {}
    /// A run finished.
    fn run_finished(&self, _run: usize, _result: &Run) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// Data ready for clustering.
pub struct Prepared<'a> {
    /// Every vector with its final weight (BIC, initialisation and labels use these).
    pub data: &'a Dataset,
    /// The rows k-means runs on: `data` itself or a weighted sample.
    pub sample: Option<Dataset>,
    /// Given initial centres (`-loadInitCtrs` / `-loadInitLabels`), replacing initialisation.
    pub initial: Option<Dataset>,
    /// Largest coordinate magnitude, for rounding-error bounds.
    pub max_abs: f64,
    /// Identical rows of the k-means rows (`sample`, or `data`).
    pub distinct: Distinct<'a>,
    /// Whether initial centre weights must be computed even when unobservable in the result
    /// (they are written by `-saveInitCtrs`).
    pub want_initial_weights: bool,
    /// Seed trials running now: a trial splits its passes across threads only while fewer
    /// trials than threads run, so that idle threads help without starting more trials (each
    /// holds its own state).
    busy: AtomicUsize,
}

impl<'a> Prepared<'a> {
    /// Prepares `data` for clustering with `opts` (draws the sample if one is asked for).
    pub fn new(data: &'a Dataset, opts: &Options) -> Result<Prepared<'a>, SimpointError> {
        let sample = match opts.sample_size {
            Some(s) => Some(sample_rows(data, s, opts.seed_sample)?),
            None => None,
        };
        let max_abs = data.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let distinct = match &sample {
            Some(s) => Distinct::hashed(s),
            None => Distinct::new(data),
        };
        Ok(Prepared {
            data,
            sample,
            initial: None,
            max_abs,
            distinct,
            want_initial_weights: false,
            busy: AtomicUsize::new(0),
        })
    }
}

fn check(opts: &Options, n: usize, initial: Option<&Dataset>) -> Result<(), SimpointError> {
    let ks: Vec<usize> = match &opts.k {
        KChoice::Search { max_k } => {
            if *max_k == 0 {
                return Err(SimpointError::Invalid(
                    "-k search needs -maxK (a positive k limit)".into(),
                ));
            }
            vec![*max_k]
        }
        KChoice::List(l) => {
            if l.is_empty() {
                return Err(SimpointError::Invalid("empty k list".into()));
            }
            l.clone()
        }
    };
    for &k in &ks {
        if k == 0 {
            return Err(SimpointError::Invalid("k must be at least 1".into()));
        }
        if k > n {
            return Err(SimpointError::TooFewVectors {
                k,
                n,
                search: matches!(opts.k, KChoice::Search { .. }),
            });
        }
        if let Some(c) = initial {
            if c.rows() != k {
                return Err(SimpointError::Invalid(format!(
                    "the initial centres hold {} rows but k = {k}",
                    c.rows()
                )));
            }
        }
    }
    if opts.num_init_seeds == 0 {
        return Err(SimpointError::Invalid(
            "-numInitSeeds must be at least 1".into(),
        ));
    }
    if !(0.0..=1.0).contains(&opts.bic_threshold) {
        return Err(SimpointError::Invalid(
            "-bicThreshold must be between 0 and 1".into(),
        ));
    }
    Ok(())
}

/// Runs every k SimPoint would run and picks the clustering SimPoint would pick.
pub fn cluster(
    prep: &Prepared<'_>,
    opts: &Options,
    observer: &dyn Observer,
) -> Result<Clustering, SimpointError> {
    let n = prep.data.rows();
    check(opts, n, prep.initial.as_ref())?;
    let mut runs: Vec<Run> = Vec::new();
    match &opts.k {
        KChoice::List(ks) => {
            for (r, &k) in ks.iter().enumerate() {
                observer.run_started(r, k);
                let run = run_k(prep, opts, r, k);
                observer.run_finished(r, &run);
                runs.push(run);
            }
        }
        KChoice::Search { max_k } => {
            let max_k = *max_k;
            let mut kvals = vec![1, max_k, max_k.div_ceil(2)];
            let (mut kmin, mut kmax) = (1usize, max_k);
            // The first three k values do not depend on any result: run them together.
            for (r, &k) in kvals.iter().enumerate() {
                observer.run_started(r, k);
            }
            let first: Vec<Run> = (0..3)
                .into_par_iter()
                .map(|r| run_k(prep, opts, r, kvals[r]))
                .collect();
            let mut r = 0;
            let mut pending = first.into_iter();
            while r < kvals.len() {
                let run = match pending.next() {
                    Some(run) => run,
                    None => {
                        observer.run_started(r, kvals[r]);
                        run_k(prep, opts, r, kvals[r])
                    }
                };
                observer.run_finished(r, &run);
                runs.push(run);
                let (mut max_i, mut min_i) = (0, 0);
                for (i, run) in runs.iter().enumerate() {
                    if run.bic > runs[max_i].bic {
                        max_i = i;
                    }
                    if run.bic < runs[min_i].bic {
                        min_i = i;
                    }
                }
                let thr =
                    runs[min_i].bic + (runs[max_i].bic - runs[min_i].bic) * opts.bic_threshold;
                if r >= 2 {
                    let k = kvals[r];
                    let upper = if max_i > min_i {
                        runs[r].bic < thr
                    } else {
                        false
                    };
                    let next = if upper {
                        kmin = k;
                        (k + kmax) / 2
                    } else {
                        kmax = k;
                        (k + kmin) / 2
                    };
                    if kmax - kmin > 1 {
                        kvals.push(next);
                    }
                }
                r += 1;
            }
        }
    }
    let best = pick_best(&runs, opts.bic_threshold);
    Ok(Clustering { runs, best })
}

/// SimPoint's final pick: the smallest k whose BIC reaches the threshold.
fn pick_best(runs: &[Run], threshold: f64) -> usize {
    if runs.len() == 1 {
        return 0;
    }
    let max = runs.iter().map(|r| r.bic).fold(f64::NEG_INFINITY, f64::max);
    let min = runs.iter().map(|r| r.bic).fold(f64::INFINITY, f64::min);
    let thr = (max - min) * threshold + min;
    let mut best: Option<usize> = None;
    for (i, r) in runs.iter().enumerate() {
        if r.bic >= thr && best.is_none_or(|b| r.k < runs[b].k) {
            best = Some(i);
        }
    }
    best.unwrap_or(0)
}

struct TrialOutcome {
    trial: Trial,
    initial: Dataset,
    centres: Dataset,
}

/// Runs every seed trial of run `r` (k = `k`) and keeps the best.
fn run_k(prep: &Prepared<'_>, opts: &Options, r: usize, k: usize) -> Run {
    let seeds = opts.num_init_seeds;
    let outcomes: Vec<TrialOutcome> = (0..seeds)
        .into_par_iter()
        .map(|s| run_trial(prep, opts, r, s, k))
        .collect();
    let mut best = 0;
    for (i, o) in outcomes.iter().enumerate() {
        if o.trial.bic > outcomes[best].trial.bic {
            best = i;
        }
    }
    let trials = outcomes.iter().map(|o| o.trial.clone()).collect();
    let TrialOutcome {
        trial,
        initial,
        centres,
    } = outcomes.into_iter().nth(best).expect("at least one trial");
    Run {
        k,
        trials,
        best_trial: best,
        bic: trial.bic,
        initial_centres: initial,
        centres,
    }
}

fn run_trial(prep: &Prepared<'_>, opts: &Options, r: usize, s: usize, k: usize) -> TrialOutcome {
    let data = prep.data;
    // SimPoint's running seed advances once per trial, and the trial index is added again.
    let logged = opts
        .seed_km
        .wrapping_add((r * opts.num_init_seeds + s) as i32);
    let seed = logged.wrapping_add(s as i32);
    let mut rng = Random::new(i64::from(seed));
    let mut initial = match &prep.initial {
        Some(c) => c.clone(),
        None => match opts.init {
            Init::Sample => kmeans::init_sample(data, k, &mut rng),
            Init::FurthestFirst => kmeans::init_furthest_first(data, k, &mut rng),
        },
    };
    let points = prep.sample.as_ref().unwrap_or(data);
    if opts.max_iter <= 1 || prep.want_initial_weights {
        kmeans::initial_weights(data, &mut initial);
    } else {
        initial.weights = vec![0.0; k];
    }
    prep.busy.fetch_add(1, Ordering::Relaxed);
    let threads = rayon::current_num_threads();
    let result = lloyd(
        points,
        &prep.distinct,
        initial.clone(),
        opts.max_iter,
        prep.max_abs,
        &|| prep.busy.load(Ordering::Relaxed) < threads,
    );
    prep.busy.fetch_sub(1, Ordering::Relaxed);
    let (score, distortion) = match (&prep.sample, result.labels) {
        (None, Some(l)) => {
            let slot = &prep.distinct.slot;
            bic(data, &result.centres, |i| l[slot[i] as usize] as usize)
        }
        _ => {
            let l = label_all(data, &result.centres);
            bic(data, &result.centres, |i| l[i] as usize)
        }
    };
    TrialOutcome {
        trial: Trial {
            logged_seed: i64::from(logged),
            iterations: result.iterations,
            bic: score,
            distortion,
        },
        initial,
        centres: result.centres,
    }
}
