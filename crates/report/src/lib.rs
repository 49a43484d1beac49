//! bbv-report: the one-page HTML report of a `bbv run` directory or a `bbv gpu sample`.
//!
//! The page is one self-contained file (inline SVG and CSS, raster images as PNG data URIs,
//! nothing from the network) with the elements `#summary`, `#timeline`, `#matrix`,
//! `#weights`, `#errors`, `#bic` and `#simulation`. A section without data says why instead
//! of vanishing, so that scripts and people find the same seven elements in every report.
//!
//! * [`Report`] is what a page shows, whoever measured it; [`html`] draws it.
//! * [`from_run_dir`] reads a run directory (what `bbv report DIR` rebuilds from);
//!   [`from_gpu_sample`] takes a GPU sample's launches.
//! * [`write`] writes `report.html` atomically.

mod draw;
mod gpu;
mod gpu_sim;
mod html;
pub mod matrix;
mod run;
mod sim;

pub use gpu_sim::{gpu_simulation_section, with_simulation, GpuFull, GpuPick, GpuSimulation};

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub use gpu::from_gpu_sample;
pub use html::html;
pub use matrix::{Matrix, MatrixBuilder};
pub use run::{from_run_dir, from_summary, from_summary_with};

/// Everything that can go wrong building a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file of the run directory is missing.
    #[error("{}: missing; {} is not a complete `bbv run` output directory", path.display(), dir.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The run directory.
        dir: PathBuf,
    },
    /// The run directory's files disagree with each other.
    #[error("{0}")]
    Inconsistent(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The page could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A run-directory file is malformed.
    #[error(transparent)]
    Rundir(#[from] bbv_rundir::RundirError),
    /// A vector or metrics file is malformed.
    #[error(transparent)]
    Profile(#[from] bbv_profile::ProfileError),
}

/// What a report shows.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Page title.
    pub title: String,
    /// What one column of the timeline is: `interval`, `slice` or `launch`.
    pub unit: String,
    /// Label and value rows of `#summary`.
    pub facts: Vec<(String, String)>,
    /// Cluster of each unit, in time order.
    pub labels: Vec<usize>,
    /// The chosen points, heaviest first.
    pub points: Vec<Point>,
    /// Per-unit curves under the timeline.
    pub curves: Vec<Curve>,
    /// Why there are no curves, when there are none.
    pub curves_note: String,
    /// The similarity matrix of the units' vectors.
    pub matrix: Option<Matrix>,
    /// Why there is no matrix, when there is none.
    pub matrix_note: String,
    /// Estimate errors of the chosen points.
    pub errors: Vec<ErrorRow>,
    /// How the errors were measured, or why there are none.
    pub errors_note: String,
    /// Scores of every k tried.
    pub by_k: Vec<KScore>,
    /// The k chosen.
    pub chosen_k: Option<usize>,
    /// How k was chosen, or why there is no k search to show.
    pub bic_note: String,
    /// ChampSim's figures (`bbv simulate`), when the regions were simulated.
    pub simulation: Option<bbv_rundir::simulation::Simulation>,
    /// Why there is no simulation, when there is none (empty: how to run one).
    pub simulation_note: String,
}

/// A chosen point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Its cluster.
    pub cluster: usize,
    /// Its unit (0-based).
    pub unit: usize,
    /// Its weight (fraction of the run it stands for).
    pub weight: f64,
    /// More to say about it (markers, kernel name).
    pub detail: String,
}

/// One curve under the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    /// Metric name.
    pub name: String,
    /// Its unit, e.g. `per 1000 instructions`.
    pub unit: String,
    /// One value per unit of the timeline.
    pub values: Vec<f64>,
    /// The whole run's value (drawn as a solid line).
    pub full: f64,
    /// The points' estimate (drawn dashed).
    pub estimate: Option<f64>,
}

/// One metric's estimate error.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorRow {
    /// Metric name.
    pub name: String,
    /// The whole run's value.
    pub full: f64,
    /// The points' estimate.
    pub estimate: f64,
    /// (estimate - full) / full, signed; None when full is 0.
    pub rel_error: Option<f64>,
    /// Half-width of the 95% band, in the metric's unit.
    pub band95: Option<f64>,
}

impl ErrorRow {
    /// A metric's row, its relative error computed from `full` and `estimate`.
    pub fn new(name: &str, full: f64, estimate: f64, band95: Option<f64>) -> ErrorRow {
        ErrorRow {
            name: name.to_string(),
            full,
            estimate,
            rel_error: (full != 0.0).then(|| (estimate - full) / full),
            band95,
        }
    }
}

/// The scores of one k tried.
#[derive(Clone, Debug, PartialEq)]
pub struct KScore {
    /// k.
    pub k: usize,
    /// (BIC - min) / (max - min) over the k tried.
    pub bic_fraction: f64,
    /// Largest relative error over the metrics, when measured.
    pub worst_rel_error: Option<f64>,
    /// BBV error, when measured.
    pub bbv_error: Option<f64>,
}

/// Writes `report` as `path`, whole or not at all.
pub fn write(path: &Path, report: &Report) -> Result<(), ReportError> {
    let page = html(report);
    let mut files = bbv_files::AtomicFiles::default();
    files.write(path, |w| w.write_all(page.as_bytes()))?;
    files.commit()?;
    Ok(())
}

/// The page of the run directory `dir` whose `summary.json` will hold `summary`.
pub fn run_report_page(dir: &Path, summary: &bbv_rundir::Summary) -> Result<String, ReportError> {
    Ok(html(&from_summary(dir, summary)?))
}

/// Rebuilds `DIR/report.html` from a run directory's files (`bbv report DIR`, and the last
/// step of `bbv run` and `bbv regions`).
pub fn write_run_report(dir: &Path) -> Result<PathBuf, ReportError> {
    let staged = bbv_rundir::update(dir, |d| -> Result<PathBuf, ReportError> {
        let report = from_run_dir(d)?;
        let path = d.join(bbv_rundir::files::REPORT);
        write(&path, &report)?;
        Ok(path)
    })?;
    Ok(bbv_files::folder::plain_path(&staged))
}
