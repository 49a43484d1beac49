//! `bbv simpoint`: modern options parsed here, SimPoint 3.2's own spelling and everything else
//! in `bbv_simpoint::driver`; progress on a terminal and SimPoint's log on stdout.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use bbv_simpoint::cfmt::g;
use bbv_simpoint::driver::{
    self, parse_dim, parse_iters, parse_unit, resolve_k, Config, VectorSource,
};
use bbv_simpoint::{Init, KChoice, Observer, Run, DEFAULT_SEED_PROJ};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

/// `bbv simpoint` with modern options. SimPoint 3.2's single-dash options are also accepted
/// (`-loadFVFile f -maxK 30 -saveSimpoints s ...`), but not mixed with these.
#[derive(Parser, Debug)]
#[command(
    name = "bbv simpoint",
    about = "Cluster basic-block vectors and pick simulation points (SimPoint 3.2 compatible)",
    after_help = "SimPoint 3.2's own options (-loadFVFile, -maxK, -saveSimpoints, -saveSimpointWeights, \
-saveLabels, -fixedLength, -coveragePct, -saveAll, ...) are accepted exactly as SimPoint spells them, \
and a symlink named 'simpoint' to the bbv binary behaves as 'bbv simpoint'."
)]
pub struct ModernArgs {
    /// BBV file (plain, gzip or zstd; detected from the content).
    pub file: PathBuf,
    /// Search k up to K (the default, with K = 30, when -k is not given).
    #[arg(long = "max-k", value_name = "K")]
    pub max_k: Option<usize>,
    /// Explicit k values: k, start:end or start:step:end, comma separated.
    #[arg(short = 'k', value_name = "LIST")]
    pub k: Option<String>,
    /// Seed trials per k.
    #[arg(long = "init-seeds", value_name = "N", default_value_t = 5)]
    pub init_seeds: usize,
    /// k-means seed.
    #[arg(
        long = "seed-km",
        default_value_t = 493_575_226,
        allow_negative_numbers = true
    )]
    pub seed_km: i32,
    /// Projection seed.
    #[arg(long = "seed-proj", default_value_t = DEFAULT_SEED_PROJ, allow_negative_numbers = true)]
    pub seed_proj: i32,
    /// Sampling seed.
    #[arg(
        long = "seed-sample",
        default_value_t = 385_089_224,
        allow_negative_numbers = true
    )]
    pub seed_sample: i32,
    /// Cluster a weighted sample of N vectors.
    #[arg(long = "sample-size", value_name = "N")]
    pub sample_size: Option<usize>,
    /// Projected dimension, or 'none'.
    #[arg(long, value_name = "D|none", default_value = "15")]
    pub dim: String,
    /// Maximum k-means iterations, or 'off'.
    #[arg(long, value_name = "N|off", default_value = "100")]
    pub iters: String,
    /// Initialisation: samp (random rows) or ff (furthest first).
    #[arg(long, value_name = "samp|ff", default_value = "samp")]
    pub init: String,
    /// Pick the smallest k whose BIC reaches this fraction of the BIC range.
    #[arg(long = "bic-threshold", default_value_t = 0.9)]
    pub bic_threshold: f64,
    /// Also write .lpt files with the largest clusters covering this fraction.
    #[arg(long, value_name = "P")]
    pub coverage: Option<f64>,
    /// Weight intervals by their instruction count (SimPoint's -fixedLength off).
    #[arg(long = "var-length")]
    pub var_length: bool,
    /// One weight per vector, whitespace separated (implies --var-length).
    #[arg(long = "vector-weights", value_name = "FILE")]
    pub vector_weights: Option<PathBuf>,
    /// Write PREFIX.simpoints, PREFIX.weights and PREFIX.labels.
    #[arg(short = 'o', value_name = "PREFIX")]
    pub output: Option<PathBuf>,
    /// Write the outputs of every k tried (SimPoint's -saveAll naming).
    #[arg(long = "save-all")]
    pub save_all: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Print SimPoint's style of log on stdout.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// Turns modern options into a [`Config`].
pub fn parse_modern(args: &[OsString]) -> Result<Config> {
    let mut argv = vec![OsString::from("bbv simpoint")];
    argv.extend(args.iter().cloned());
    let m = ModernArgs::try_parse_from(argv).map_err(|e| {
        if matches!(
            e.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        ) {
            let _ = e.print();
            std::process::exit(0);
        }
        anyhow::anyhow!(
            "{}",
            e.render()
                .to_string()
                .trim_start_matches("error: ")
                .trim_end()
        )
    })?;
    let mut cfg = Config::new(VectorSource::Fv(m.file));
    cfg.opts.k = match (&m.k, m.max_k) {
        (None, None) => KChoice::Search { max_k: 30 },
        (k, mk) => resolve_k(k.as_deref(), mk, "--max-k")?,
    };
    if m.init_seeds == 0 {
        bail!("option --init-seeds: must be at least 1");
    }
    cfg.opts.num_init_seeds = m.init_seeds;
    cfg.opts.seed_km = m.seed_km;
    cfg.seed_proj = m.seed_proj;
    cfg.opts.seed_sample = m.seed_sample;
    cfg.opts.sample_size = match m.sample_size {
        Some(0) => bail!("option --sample-size: must be at least 1"),
        s => s,
    };
    cfg.dim = parse_dim("--dim", &m.dim)?;
    cfg.opts.max_iter = parse_iters("--iters", &m.iters)?;
    cfg.opts.init = match m.init.as_str() {
        "samp" => Init::Sample,
        "ff" => Init::FurthestFirst,
        other => bail!("option --init: '{other}' is neither 'samp' nor 'ff'"),
    };
    cfg.opts.bic_threshold = parse_unit("--bic-threshold", &m.bic_threshold.to_string(), true)?;
    if let Some(p) = m.coverage {
        cfg.coverage = parse_unit("--coverage", &p.to_string(), false)?;
    }
    if m.var_length {
        cfg.fixed_length = Some(false);
    }
    cfg.load_vector_weights = m.vector_weights;
    cfg.save_all = m.save_all;
    if let Some(prefix) = &m.output {
        let with = |ext: &str| {
            let mut s = prefix.clone().into_os_string();
            s.push(ext);
            PathBuf::from(s)
        };
        cfg.save_simpoints = Some(with(".simpoints"));
        cfg.save_weights = Some(with(".weights"));
        cfg.save_labels = Some(with(".labels"));
    }
    cfg.json = m.json;
    cfg.log = m.verbose && !m.json;
    cfg.summary = !m.json && !m.verbose;
    Ok(cfg)
}

/// Progress on a terminal (hidden when stderr is not one) and SimPoint's log when asked.
struct Reporter {
    bar: ProgressBar,
    log: bool,
    seeds: usize,
    max_runs: Option<usize>,
}

impl Reporter {
    fn say(&self, text: &str) {
        self.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        });
    }
}

impl Observer for Reporter {
    fn run_started(&self, run: usize, k: usize) {
        self.bar
            .set_message(crate::progress::run_started(run, self.max_runs, k));
    }

    fn run_finished(&self, run: usize, result: &Run) {
        self.bar.set_message(format!(
            "clustering: run {} (k = {}) done, BIC {}",
            run + 1,
            result.k,
            g(result.bic)
        ));
        if self.log {
            self.say(&driver::run_log(run, result, self.seeds, self.max_runs));
        }
    }
}

impl driver::Reporter for Reporter {
    fn status(&self, text: &str) {
        self.bar.set_message(text.to_string());
    }

    fn log(&self, text: &str) {
        self.say(text);
    }

    fn clustered(&self) {
        self.bar.finish_and_clear();
    }
}

/// Parses either option style.
pub fn parse(args: &[OsString]) -> Result<Config> {
    Ok(if driver::is_legacy(args) {
        driver::parse_legacy(args)?
    } else {
        parse_modern(args)?
    })
}

/// Runs `bbv simpoint`.
pub fn run(cfg: Config) -> Result<()> {
    let started = Instant::now();
    let bar = ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("template"));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let reporter = Reporter {
        bar: bar.clone(),
        log: cfg.log,
        seeds: cfg.opts.num_init_seeds,
        max_runs: Some(cfg.opts.k.max_runs()),
    };
    if cfg.log {
        let args: Vec<String> = std::env::args().collect();
        reporter.say(&format!("Command-line: \"{}\"\n", args.join(" ")));
    }
    let finished = driver::run(&cfg, &reporter)?;
    if cfg.json {
        finished.write_json(std::io::stdout().lock(), started.elapsed().as_secs_f64())?;
    } else if cfg.summary {
        finished.write_summary(std::io::stdout().lock())?;
    } else if cfg.log {
        reporter.say(&finished.saved_log());
    }
    Ok(())
}
