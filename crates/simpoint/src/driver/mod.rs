//! `bbv simpoint` from options to files: load and project the vectors, weight them, cluster,
//! and write every output SimPoint 3.2 writes (all of them, or none when a step fails).
//!
//! The caller parses its command line into a [`Config`] (SimPoint's own spelling through
//! [`parse_legacy`]), shows progress through a [`Reporter`] and prints what [`Finished`]
//! renders.

/// `return Err(SimpointError::Invalid(format!(...)))`: a bad option or input, explained.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::SimpointError::Invalid(format!($($t)*)))
    };
}

mod inputs;
mod options;

use std::io::Write;
use std::path::{Path, PathBuf};

use bbv_files::AtomicFiles;

use crate::cfmt::{g, push_g};
use crate::{
    cluster, Clustering, Dataset, Observer, PostResult, Prepared, Projection, Run, SimpointError,
};
use inputs::{centres_from_labels, lpt_suffix, read_dataset, read_vector_weights, with_suffix};
pub use options::{
    is_legacy, parse_dim, parse_iters, parse_k_list, parse_legacy, parse_unit, resolve_k, Config,
    VectorSource,
};

type Result<T> = std::result::Result<T, SimpointError>;

/// Where the driver reports as it goes: the clustering's progress ([`Observer`]), a status
/// line, and SimPoint's log when [`Config::log`] asks for it.
pub trait Reporter: Observer {
    /// What the driver is doing now (a progress line).
    fn status(&self, _text: &str) {}
    /// A piece of SimPoint's log (only called with [`Config::log`]).
    fn log(&self, _text: &str) {}
    /// The clustering ended: no more status lines.
    fn clustered(&self) {}
}

/// The text SimPoint 3.2 logs after each run of its k search (`-verbose`).
pub fn run_log(run: usize, result: &Run, seeds: usize, max_runs: Option<usize>) -> String {
    let mut s = String::new();
    s.push_str("\n--------------------------------------------------------------\n");
    match max_runs {
        Some(m) => s.push_str(&format!(
            "Run number {} of at most {m}, k = {}\n",
            run + 1,
            result.k
        )),
        None => s.push_str(&format!("Run number {}, k = {}\n", run + 1, result.k)),
    }
    s.push_str("--------------------------------------------------------------\n");
    for (t, trial) in result.trials.iter().enumerate() {
        s.push_str("  --------------------------------------------------------------\n");
        s.push_str(&format!(
            "  Initialization seed trial #{} of {seeds}; initialization seed = {}\n",
            t + 1,
            trial.logged_seed
        ));
        s.push_str("  --------------------------------------------------------------\n");
        s.push_str(&format!(
            "  Number of k-means iterations performed: {}\n  BIC score: {}\n  Distortion: {}\n",
            trial.iterations,
            g(trial.bic),
            g(trial.distortion)
        ));
    }
    s.push_str(&format!(
        "  The best initialization seed trial was #{}\n",
        result.best_trial + 1
    ));
    s
}

/// What a finished `bbv simpoint` found and wrote.
pub struct Finished {
    /// Every run of the k search.
    pub clustering: Clustering,
    /// The chosen run's simulation points and weights.
    pub post: PostResult,
    /// The files written, in order.
    pub written: Vec<PathBuf>,
    /// Vectors clustered.
    pub vectors: usize,
    /// Their dimension before projection (the largest block id).
    pub dimensions: usize,
}

impl Finished {
    fn best(&self) -> &Run {
        &self.clustering.runs[self.clustering.best]
    }

    /// The chosen clusters with their weights renormalised over them.
    fn points(&self) -> (Vec<usize>, f64) {
        let selected = self.post.selected(1.0);
        let total: f64 = selected.iter().fold(0.0, |a, &c| a + self.post.weights[c]);
        (selected, total)
    }

    /// The result as `bbv simpoint --json` prints it.
    pub fn write_json(&self, mut w: impl Write, seconds: f64) -> std::io::Result<()> {
        let (selected, total) = self.points();
        let bics: Vec<_> = (self.clustering.runs.iter())
            .map(|r| serde_json::json!({"k": r.k, "bic": r.bic}))
            .collect();
        let points: Vec<_> = selected
            .iter()
            .map(|&c| {
                serde_json::json!({
                    "cluster": c,
                    "interval": self.post.simpoints[c],
                    "weight": self.post.weights[c] / total,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "k": self.best().k,
            "vectors": self.vectors,
            "dimensions": self.dimensions,
            "bic": bics,
            "simpoints": points,
            "files": self.written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "seconds": seconds,
        });
        writeln!(w, "{}", serde_json::to_string_pretty(&doc)?)
    }

    /// The short summary `bbv simpoint` prints when nothing else goes to stdout.
    pub fn write_summary(&self, mut w: impl Write) -> std::io::Result<()> {
        let (selected, total) = self.points();
        let best = self.best();
        let tried: Vec<String> = (self.clustering.runs.iter())
            .map(|r| r.k.to_string())
            .collect();
        let mut s = format!(
            "{} vectors ({} blocks); tried k = {}; picked k = {} (BIC {})\n",
            self.vectors,
            self.dimensions,
            tried.join(", "),
            best.k,
            g(best.bic)
        );
        s.push_str("cluster  interval  weight\n");
        for &c in &selected {
            s.push_str(&format!(
                "{c:>7}  {:>8}  {}\n",
                self.post.simpoints[c],
                g(self.post.weights[c] / total)
            ));
        }
        for p in &self.written {
            s.push_str(&format!("wrote {}\n", p.display()));
        }
        w.write_all(s.as_bytes())
    }

    /// The closing lines of SimPoint's log: the files saved.
    pub fn saved_log(&self) -> String {
        let mut s = String::from("  Post-processing done\n");
        for p in &self.written {
            s.push_str(&format!("    Saved '{}'\n", p.display()));
        }
        s
    }
}

/// Runs `bbv simpoint`: every output of `cfg` is written, or none.
pub fn run(cfg: &Config, reporter: &dyn Reporter) -> Result<Finished> {
    let say = |text: &str| {
        if cfg.log {
            reporter.log(text)
        }
    };
    let (data, dimensions, matrix) = load(cfg, reporter, &say)?;
    let mut files = AtomicFiles::default();
    save_inputs(cfg, &data, matrix.as_ref(), &mut files)?;

    let mut prep = Prepared::new(&data, &cfg.opts)?;
    prep.want_initial_weights = cfg.save_init_ctrs.is_some();
    if let Some(p) = &cfg.load_init_ctrs {
        let c = read_dataset(p, false)?;
        if c.cols != data.cols {
            bail!(
                "{}: centres have {} columns, the vectors {}",
                p.display(),
                c.cols,
                data.cols
            );
        }
        prep.initial = Some(c);
    } else if let Some(p) = &cfg.load_init_labels {
        prep.initial = Some(centres_from_labels(p, &data)?);
    }
    let clustering: Clustering = cluster(&prep, &cfg.opts, reporter).map_err(|e| match e {
        SimpointError::TooFewVectors { .. } => SimpointError::InFile {
            path: cfg.input.path().to_path_buf(),
            source: Box::new(e),
        },
        e => e,
    })?;
    reporter.clustered();

    let best = &clustering.runs[clustering.best];
    say(&format!(
        "\n  For the BIC threshold, the best clustering was run {} (k = {})\n",
        clustering.best + 1,
        best.k
    ));
    let post = save_outputs(cfg, &data, &clustering, &mut files)?;
    let written = files.commit()?;
    Ok(Finished {
        clustering,
        post,
        written,
        vectors: data.rows(),
        dimensions,
    })
}

/// The vectors, weighted, with their dimension and the projection matrix when one was made.
fn load(
    cfg: &Config,
    reporter: &dyn Reporter,
    say: &dyn Fn(&str),
) -> Result<(Dataset, usize, Option<Dataset>)> {
    let fixed = cfg.fixed_length;
    if cfg.load_vector_weights.is_some() && fixed == Some(true) {
        bail!("-loadVectorWeights (--vector-weights) weights the vectors, which contradicts -fixedLength on");
    }
    let mut matrix: Option<Dataset> = None;
    let (mut data, num_dims) = match &cfg.input {
        VectorSource::Fv(path) => {
            let projection = match (&cfg.load_proj, cfg.dim) {
                (Some((p, bin)), _) => Projection::Matrix(read_dataset(p, *bin)?),
                (None, None) => Projection::None,
                (None, Some(dim)) => Projection::Random {
                    dim,
                    seed: i64::from(cfg.seed_proj),
                },
            };
            reporter.status(&format!("reading {}", path.display()));
            let loaded = crate::load_file(path, &projection, |n| {
                reporter.status(&format!("reading {}: {n} vectors", path.display()))
            })?;
            matrix = loaded.matrix;
            say(&format!(
                "  Loading data from frequency vector file '{}' (size: {}x{})\n",
                path.display(),
                loaded.vectors.rows(),
                loaded.num_dims
            ));
            (loaded.vectors, loaded.num_dims)
        }
        VectorSource::Txt(path) | VectorSource::Bin(path) => {
            if fixed.is_none() && cfg.load_vector_weights.is_none() {
                bail!(
                    "-loadVectorsTxtFmt / -loadVectorsBinFmt need an explicit -fixedLength on|off"
                );
            }
            let d = read_dataset(path, matches!(cfg.input, VectorSource::Bin(_)))?;
            if d.rows() == 0 {
                bail!("{}: the dataset holds no vectors", path.display());
            }
            let cols = d.cols;
            (d, cols)
        }
    };
    let n = data.rows();
    if let Some(want) = cfg.num_fvs {
        if want != n {
            bail!("-numFVs {want}, but the input holds {n} vectors");
        }
    }
    if let Some(want) = cfg.fv_dim {
        if want != num_dims {
            bail!("-FVDim {want}, but the input's largest block id is {num_dims}");
        }
    }
    if let Some(p) = &cfg.load_vector_weights {
        data.weights = read_vector_weights(p, n, cfg.input.path())?;
    } else if fixed != Some(false) {
        let w = 1.0 / n as f64;
        data.weights.iter_mut().for_each(|x| *x = w);
    }
    Ok((data, num_dims, matrix))
}

/// The vectors, their weights and the projection matrix, where asked.
fn save_inputs(
    cfg: &Config,
    data: &Dataset,
    matrix: Option<&Dataset>,
    files: &mut AtomicFiles,
) -> Result<()> {
    if let Some(p) = &cfg.save_vectors_txt {
        files.write(p, |w| data.write_text(w))?;
    }
    if let Some(p) = &cfg.save_vectors_bin {
        files.write(p, |w| data.write_binary(w))?;
    }
    if let Some(p) = &cfg.save_vector_weights {
        files.write(p, |w| {
            let mut s = String::new();
            for &x in &data.weights {
                push_g(&mut s, x, 20);
                s.push('\n');
            }
            w.write_all(s.as_bytes())
        })?;
    }
    if cfg.save_proj_txt.is_some() || cfg.save_proj_bin.is_some() {
        let Some(m) = matrix else {
            bail!("no projection matrix to save: the vectors are not projected");
        };
        if let Some(p) = &cfg.save_proj_txt {
            files.write(p, |w| m.write_text(w))?;
        }
        if let Some(p) = &cfg.save_proj_bin {
            files.write(p, |w| m.write_binary(w))?;
        }
    }
    Ok(())
}

/// Labels, points, weights (and their `.lpt` coverage files) of the chosen run, or of every
/// run with `-saveAll`, and the centres; returns the chosen run's points.
fn save_outputs(
    cfg: &Config,
    data: &Dataset,
    result: &Clustering,
    files: &mut AtomicFiles,
) -> Result<PostResult> {
    let which: Vec<usize> = if cfg.save_all {
        (0..result.runs.len()).collect()
    } else {
        vec![result.best]
    };
    let mut best_post = None;
    for &r in &which {
        let run = &result.runs[r];
        let post = PostResult::new(data, &run.centres);
        let name = |p: &Path, lpt: bool| -> PathBuf {
            let mut s = String::new();
            if lpt {
                s.push_str(&lpt_suffix(cfg.coverage));
            }
            if cfg.save_all {
                s.push_str(&format!(".run_{}_k_{}", r + 1, run.k));
            }
            with_suffix(p, &s)
        };
        if let Some(p) = &cfg.save_labels {
            files.write(&name(p, false), |w| post.write_labels(w))?;
        }
        if let Some(p) = &cfg.save_simpoints {
            files.write(&name(p, false), |w| post.write_simpoints(w, 1.0))?;
            if cfg.coverage < 1.0 {
                files.write(&name(p, true), |w| post.write_simpoints(w, cfg.coverage))?;
            }
        }
        if let Some(p) = &cfg.save_weights {
            files.write(&name(p, false), |w| post.write_weights(w, 1.0))?;
            if cfg.coverage < 1.0 {
                files.write(&name(p, true), |w| post.write_weights(w, cfg.coverage))?;
            }
        }
        if r == result.best {
            best_post = Some(post);
        }
    }
    let best = &result.runs[result.best];
    if let Some(p) = &cfg.save_init_ctrs {
        files.write(p, |w| best.initial_centres.write_text(w))?;
    }
    if let Some(p) = &cfg.save_final_ctrs {
        files.write(p, |w| best.centres.write_text(w))?;
    }
    Ok(best_post.expect("the chosen run is among those written"))
}
