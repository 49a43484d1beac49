//! `bbv simpoint`: modern options, and every SimPoint 3.2 option spelled as SimPoint spells it.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bbv_simpoint::cfmt::{g, push_g};
use bbv_simpoint::{
    cluster, Clustering, Dataset, Init, KChoice, Observer, Options, PostResult, Prepared,
    Projection, Run, DEFAULT_DIM, DEFAULT_SEED_PROJ,
};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use bbv_files::AtomicFiles;

/// Where the vectors come from.
#[derive(Clone, Debug)]
pub enum VectorSource {
    /// A BBV (frequency vector) file, projected while read.
    Fv(PathBuf),
    /// A SimPoint text dataset, used as is.
    Txt(PathBuf),
    /// A SimPoint binary dataset, used as is.
    Bin(PathBuf),
}

/// Everything `bbv simpoint` needs, whichever option style it came from.
#[derive(Clone, Debug)]
pub struct Config {
    pub input: VectorSource,
    pub opts: Options,
    /// None = noProject.
    pub dim: Option<usize>,
    pub seed_proj: i32,
    pub load_proj: Option<(PathBuf, bool)>,
    pub load_init_ctrs: Option<PathBuf>,
    pub load_init_labels: Option<PathBuf>,
    pub load_vector_weights: Option<PathBuf>,
    /// None = not given (on by default).
    pub fixed_length: Option<bool>,
    pub coverage: f64,
    pub save_all: bool,
    pub num_fvs: Option<usize>,
    pub fv_dim: Option<usize>,
    pub save_simpoints: Option<PathBuf>,
    pub save_weights: Option<PathBuf>,
    pub save_labels: Option<PathBuf>,
    pub save_vector_weights: Option<PathBuf>,
    pub save_init_ctrs: Option<PathBuf>,
    pub save_final_ctrs: Option<PathBuf>,
    pub save_vectors_txt: Option<PathBuf>,
    pub save_vectors_bin: Option<PathBuf>,
    pub save_proj_txt: Option<PathBuf>,
    pub save_proj_bin: Option<PathBuf>,
    /// Print SimPoint's style of log on stdout.
    pub log: bool,
    pub json: bool,
    /// Print a short summary when nothing else goes to stdout.
    pub summary: bool,
}

impl Config {
    fn new(input: VectorSource) -> Config {
        Config {
            input,
            opts: Options::default(),
            dim: Some(DEFAULT_DIM),
            seed_proj: DEFAULT_SEED_PROJ,
            load_proj: None,
            load_init_ctrs: None,
            load_init_labels: None,
            load_vector_weights: None,
            fixed_length: None,
            coverage: 1.0,
            save_all: false,
            num_fvs: None,
            fv_dim: None,
            save_simpoints: None,
            save_weights: None,
            save_labels: None,
            save_vector_weights: None,
            save_init_ctrs: None,
            save_final_ctrs: None,
            save_vectors_txt: None,
            save_vectors_bin: None,
            save_proj_txt: None,
            save_proj_bin: None,
            log: false,
            json: false,
            summary: false,
        }
    }
}

/// SimPoint 3.2's options that take a value.
const LEGACY_VALUED: &[&str] = &[
    "-loadFVFile",
    "-k",
    "-iters",
    "-dim",
    "-maxK",
    "-numInitSeeds",
    "-coveragePct",
    "-bicThreshold",
    "-initkm",
    "-saveLabels",
    "-saveSimpoints",
    "-saveSimpointWeights",
    "-saveVectorWeights",
    "-saveInitCtrs",
    "-saveFinalCtrs",
    "-saveVectorsTxtFmt",
    "-saveVectorsBinFmt",
    "-saveProjMatrixTxtFmt",
    "-saveProjMatrixBinFmt",
    "-loadVectorsTxtFmt",
    "-loadVectorsBinFmt",
    "-loadProjMatrixTxtFmt",
    "-loadProjMatrixBinFmt",
    "-loadInitCtrs",
    "-loadInitLabels",
    "-loadVectorWeights",
    "-fixedLength",
    "-numFVs",
    "-FVDim",
    "-sampleSize",
    "-seedkm",
    "-seedproj",
    "-seedsample",
    "-verbose",
];
/// SimPoint 3.2's flags.
const LEGACY_FLAGS: &[&str] = &["-saveAll", "-inputVectorsGzipped"];

/// Whether the arguments use SimPoint's single-dash spelling.
pub fn is_legacy(args: &[OsString]) -> bool {
    args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a != "-k" && (LEGACY_VALUED.contains(&a) || LEGACY_FLAGS.contains(&a)))
    })
}

/// Parses SimPoint's k list: `k`, `start:end` or `start:step:end`, comma separated.
pub fn parse_k_list(text: &str) -> Result<Vec<usize>> {
    let mut ks = Vec::new();
    for part in text.split(',') {
        let nums: Vec<i64> = part
            .split(':')
            .map(|p| {
                p.trim()
                    .parse::<i64>()
                    .with_context(|| format!("bad k list '{text}': '{p}' is not an integer"))
            })
            .collect::<Result<_>>()?;
        let (start, step, end) = match nums[..] {
            [k] => (k, 1, k),
            [a, b] => (a, 1, b),
            [a, s, b] => (a, s, b),
            _ => bail!("bad k list '{text}': '{part}' has more than three ':' fields"),
        };
        if step == 0 {
            bail!("bad k list '{text}': step 0 in '{part}'");
        }
        // SimPoint silently fixes the step's sign to go from start to end.
        let step = if end >= start {
            step.abs()
        } else {
            -step.abs()
        };
        let mut k = start;
        loop {
            if k < 1 {
                bail!("bad k list '{text}': k must be at least 1");
            }
            ks.push(k as usize);
            if ks.len() > 100_000 {
                bail!("bad k list '{text}': too many values");
            }
            k += step;
            if (step > 0 && k > end) || (step < 0 && k < end) {
                break;
            }
        }
    }
    Ok(ks)
}

fn parse_num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T> {
    v.parse()
        .map_err(|_| anyhow::anyhow!("option {opt}: '{v}' is not a valid number"))
}

fn parse_seed(opt: &str, v: &str) -> Result<i32> {
    parse_num::<i32>(opt, v)
}

fn parse_iters(opt: &str, v: &str) -> Result<usize> {
    if v == "off" {
        return Ok(i32::MAX as usize);
    }
    let n: i64 = parse_num(opt, v)?;
    if n < 0 {
        bail!("option {opt}: must be 0 or more, or 'off'");
    }
    Ok(n as usize)
}

fn parse_dim(opt: &str, v: &str) -> Result<Option<usize>> {
    if v == "noProject" || v == "none" {
        return Ok(None);
    }
    let d: usize = parse_num(opt, v)?;
    if d == 0 {
        bail!("option {opt}: the dimension must be at least 1 (or noProject)");
    }
    Ok(Some(d))
}

fn parse_unit(opt: &str, v: &str, allow_zero: bool) -> Result<f64> {
    let x: f64 = parse_num(opt, v)?;
    let ok = if allow_zero {
        (0.0..=1.0).contains(&x)
    } else {
        x > 0.0 && x <= 1.0
    };
    if !ok {
        bail!(
            "option {opt}: {v} is out of range ({} to 1)",
            if allow_zero { "0" } else { "above 0" }
        );
    }
    Ok(x)
}

fn parse_positive(opt: &str, v: &str) -> Result<usize> {
    let n: usize = parse_num(opt, v)?;
    if n == 0 {
        bail!("option {opt}: must be at least 1");
    }
    Ok(n)
}

/// Parses SimPoint 3.2's command line (without the program name).
pub fn parse_legacy(args: &[OsString]) -> Result<Config> {
    let mut cfg = Config::new(VectorSource::Fv(PathBuf::new()));
    let mut source: Option<VectorSource> = None;
    let mut k_text: Option<String> = None;
    let mut max_k: Option<usize> = None;
    cfg.log = true;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i]
            .to_str()
            .with_context(|| format!("argument {:?} is not valid UTF-8", args[i]))?;
        i += 1;
        if LEGACY_FLAGS.contains(&arg) {
            if arg == "-saveAll" {
                cfg.save_all = true;
            }
            continue;
        }
        if !LEGACY_VALUED.contains(&arg) {
            bail!(
                "unknown option '{arg}' (SimPoint 3.2 would ignore it; run 'bbv simpoint --help')"
            );
        }
        let value = args
            .get(i)
            .with_context(|| format!("option {arg} needs a value"))?
            .to_str()
            .with_context(|| format!("option {arg}: value is not valid UTF-8"))?
            .to_string();
        i += 1;
        let path = || PathBuf::from(&value);
        let mut set_source = |s: VectorSource| -> Result<()> {
            if source.is_some() {
                bail!("only one of -loadFVFile, -loadVectorsTxtFmt and -loadVectorsBinFmt may be given");
            }
            source = Some(s);
            Ok(())
        };
        match arg {
            "-loadFVFile" => set_source(VectorSource::Fv(path()))?,
            "-loadVectorsTxtFmt" => set_source(VectorSource::Txt(path()))?,
            "-loadVectorsBinFmt" => set_source(VectorSource::Bin(path()))?,
            "-k" => k_text = Some(value.clone()),
            "-maxK" => max_k = Some(parse_positive(arg, &value)?),
            "-iters" => cfg.opts.max_iter = parse_iters(arg, &value)?,
            "-dim" => cfg.dim = parse_dim(arg, &value)?,
            "-numInitSeeds" => cfg.opts.num_init_seeds = parse_positive(arg, &value)?,
            "-coveragePct" => cfg.coverage = parse_unit(arg, &value, false)?,
            "-bicThreshold" => cfg.opts.bic_threshold = parse_unit(arg, &value, true)?,
            "-initkm" => {
                cfg.opts.init = match value.as_str() {
                    "samp" => Init::Sample,
                    "ff" => Init::FurthestFirst,
                    _ => bail!("option -initkm: '{value}' is neither 'samp' nor 'ff'"),
                }
            }
            "-saveLabels" => cfg.save_labels = Some(path()),
            "-saveSimpoints" => cfg.save_simpoints = Some(path()),
            "-saveSimpointWeights" => cfg.save_weights = Some(path()),
            "-saveVectorWeights" => cfg.save_vector_weights = Some(path()),
            "-saveInitCtrs" => cfg.save_init_ctrs = Some(path()),
            "-saveFinalCtrs" => cfg.save_final_ctrs = Some(path()),
            "-saveVectorsTxtFmt" => cfg.save_vectors_txt = Some(path()),
            "-saveVectorsBinFmt" => cfg.save_vectors_bin = Some(path()),
            "-saveProjMatrixTxtFmt" => cfg.save_proj_txt = Some(path()),
            "-saveProjMatrixBinFmt" => cfg.save_proj_bin = Some(path()),
            "-loadProjMatrixTxtFmt" => cfg.load_proj = Some((path(), false)),
            "-loadProjMatrixBinFmt" => cfg.load_proj = Some((path(), true)),
            "-loadInitCtrs" => cfg.load_init_ctrs = Some(path()),
            "-loadInitLabels" => cfg.load_init_labels = Some(path()),
            "-loadVectorWeights" => cfg.load_vector_weights = Some(path()),
            "-fixedLength" => {
                cfg.fixed_length = Some(match value.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => bail!("option -fixedLength: '{value}' is neither 'on' nor 'off'"),
                })
            }
            "-numFVs" => cfg.num_fvs = Some(parse_positive(arg, &value)?),
            "-FVDim" => cfg.fv_dim = Some(parse_positive(arg, &value)?),
            "-sampleSize" => cfg.opts.sample_size = Some(parse_positive(arg, &value)?),
            "-seedkm" => cfg.opts.seed_km = parse_seed(arg, &value)?,
            "-seedproj" => cfg.seed_proj = parse_seed(arg, &value)?,
            "-seedsample" => cfg.opts.seed_sample = parse_seed(arg, &value)?,
            "-verbose" => {
                parse_num::<i32>(arg, &value)?;
            }
            _ => unreachable!("option table and match disagree on {arg}"),
        }
    }
    cfg.input = source
        .context("no input: give -loadFVFile FILE (or -loadVectorsTxtFmt / -loadVectorsBinFmt)")?;
    cfg.opts.k = resolve_k(k_text.as_deref(), max_k, "-maxK")?;
    Ok(cfg)
}

fn resolve_k(k_text: Option<&str>, max_k: Option<usize>, max_name: &str) -> Result<KChoice> {
    match k_text {
        None | Some("search") => match max_k {
            Some(m) => Ok(KChoice::Search { max_k: m }),
            None => bail!("searching for k needs {max_name} (or give explicit k values with -k)"),
        },
        Some(list) => {
            if max_k.is_some() {
                bail!("{max_name} cannot be combined with an explicit -k list");
            }
            Ok(KChoice::List(parse_k_list(list)?))
        }
    }
}

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
        if self.log {
            self.bar.suspend(|| {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            });
        }
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
        if !self.log {
            return;
        }
        let mut s = String::new();
        s.push_str("\n--------------------------------------------------------------\n");
        match self.max_runs {
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
                "  Initialization seed trial #{} of {}; initialization seed = {}\n",
                t + 1,
                self.seeds,
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
        self.say(&s);
    }
}

fn read_vector_weights(path: &Path, n: usize) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut w = Vec::with_capacity(n);
    for (ln, line) in text.lines().enumerate() {
        for word in line.split_whitespace() {
            let v: f64 = word.parse().map_err(|_| {
                anyhow::anyhow!("{}:{}: '{word}' is not a number", path.display(), ln + 1)
            })?;
            if !(v.is_finite() && v >= 0.0) {
                bail!(
                    "{}:{}: weight {word} must be finite and not negative",
                    path.display(),
                    ln + 1
                );
            }
            w.push(v);
        }
    }
    if w.len() != n {
        bail!("{}: {} weights for {n} vectors", path.display(), w.len());
    }
    let total = w.iter().fold(0.0, |a, &b| a + b);
    if total <= 0.0 {
        bail!("{}: the weights sum to 0", path.display());
    }
    Ok(w.into_iter().map(|x| x / total).collect())
}

fn read_dataset(path: &Path, binary: bool) -> Result<Dataset> {
    let file = File::open(path).with_context(|| format!("{}", path.display()))?;
    Ok(if binary {
        Dataset::read_binary(BufReader::new(file), path)?
    } else {
        Dataset::read_text(BufReader::new(file), path)?
    })
}

/// Centres as the weighted means of the rows carrying each label (`-loadInitLabels`).
fn centres_from_labels(path: &Path, data: &Dataset) -> Result<Dataset> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut labels = Vec::with_capacity(data.rows());
    for (ln, line) in text.lines().enumerate() {
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        let l: usize = word.parse().map_err(|_| {
            anyhow::anyhow!(
                "{}:{}: '{word}' is not a cluster number",
                path.display(),
                ln + 1
            )
        })?;
        labels.push(l);
    }
    if labels.len() != data.rows() {
        bail!(
            "{}: {} labels for {} vectors",
            path.display(),
            labels.len(),
            data.rows()
        );
    }
    let k = labels.iter().max().map_or(0, |m| m + 1);
    let mut c = Dataset::zeros(k, data.cols);
    for (i, &l) in labels.iter().enumerate() {
        let w = data.weights[i];
        for (acc, &v) in c.row_mut(l).iter_mut().zip(data.row(i)) {
            *acc += v * w;
        }
        c.weights[l] += w;
    }
    for l in 0..k {
        let w = c.weights[l];
        if w > 0.0 {
            c.row_mut(l).iter_mut().for_each(|v| *v /= w);
        }
    }
    Ok(c)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `.lpt` suffix as SimPoint names it (`%g` of the coverage).
fn lpt_suffix(coverage: f64) -> String {
    format!(".lpt{}", g(coverage))
}

/// Runs `bbv simpoint`.
pub fn run(cfg: Config) -> Result<()> {
    let started = Instant::now();
    let bar = ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("template"));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let max_runs = Some(cfg.opts.k.max_runs());
    let reporter = Reporter {
        bar: bar.clone(),
        log: cfg.log,
        seeds: cfg.opts.num_init_seeds,
        max_runs,
    };
    if cfg.log {
        let args: Vec<String> = std::env::args().collect();
        reporter.say(&format!("Command-line: \"{}\"\n", args.join(" ")));
    }

    // Vectors and their weights.
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
            bar.set_message(format!("reading {}", path.display()));
            let loaded = bbv_simpoint::load_file(path, &projection, |n| {
                bar.set_message(format!("reading {}: {n} vectors", path.display()))
            })?;
            matrix = loaded.matrix;
            reporter.say(&format!(
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
        data.weights = read_vector_weights(p, n)?;
    } else if fixed != Some(false) {
        let w = 1.0 / n as f64;
        data.weights.iter_mut().for_each(|x| *x = w);
    }

    let mut files = AtomicFiles::default();
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
        let Some(m) = &matrix else {
            bail!("no projection matrix to save: the vectors are not projected");
        };
        if let Some(p) = &cfg.save_proj_txt {
            files.write(p, |w| m.write_text(w))?;
        }
        if let Some(p) = &cfg.save_proj_bin {
            files.write(p, |w| m.write_binary(w))?;
        }
    }

    // Clustering.
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
    let result: Clustering = cluster(&prep, &cfg.opts, &reporter)?;
    bar.finish_and_clear();

    // Outputs.
    let best = &result.runs[result.best];
    let which: Vec<usize> = if cfg.save_all {
        (0..result.runs.len()).collect()
    } else {
        vec![result.best]
    };
    reporter.say(&format!(
        "\n  For the BIC threshold, the best clustering was run {} (k = {})\n",
        result.best + 1,
        best.k
    ));
    let mut best_post = None;
    for &r in &which {
        let run = &result.runs[r];
        let post = PostResult::new(&data, &run.centres);
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
    if let Some(p) = &cfg.save_init_ctrs {
        files.write(p, |w| best.initial_centres.write_text(w))?;
    }
    if let Some(p) = &cfg.save_final_ctrs {
        files.write(p, |w| best.centres.write_text(w))?;
    }
    let written = files.commit()?;
    let post = best_post.expect("best run post-processed");

    let selected = post.selected(1.0);
    let total: f64 = selected.iter().fold(0.0, |a, &c| a + post.weights[c]);
    if cfg.json {
        let bics: Vec<_> = result
            .runs
            .iter()
            .map(|r| serde_json::json!({"k": r.k, "bic": r.bic}))
            .collect();
        let points: Vec<_> = selected
            .iter()
            .map(|&c| {
                serde_json::json!({
                    "cluster": c,
                    "interval": post.simpoints[c],
                    "weight": post.weights[c] / total,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "k": best.k,
            "vectors": n,
            "dimensions": num_dims,
            "bic": bics,
            "simpoints": points,
            "files": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if cfg.summary {
        let mut s = format!(
            "{n} vectors ({num_dims} blocks); tried k = {}; picked k = {} (BIC {})\n",
            result
                .runs
                .iter()
                .map(|r| r.k.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            best.k,
            g(best.bic)
        );
        s.push_str("cluster  interval  weight\n");
        for &c in &selected {
            s.push_str(&format!(
                "{c:>7}  {:>8}  {}\n",
                post.simpoints[c],
                g(post.weights[c] / total)
            ));
        }
        for p in &written {
            s.push_str(&format!("wrote {}\n", p.display()));
        }
        print!("{s}");
    } else {
        let mut s = String::from("  Post-processing done\n");
        for p in &written {
            s.push_str(&format!("    Saved '{}'\n", p.display()));
        }
        reporter.say(&s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_lists() {
        assert_eq!(parse_k_list("6,9,14").unwrap(), vec![6, 9, 14]);
        assert_eq!(parse_k_list("4:8").unwrap(), vec![4, 5, 6, 7, 8]);
        assert_eq!(parse_k_list("8:4").unwrap(), vec![8, 7, 6, 5, 4]);
        assert_eq!(parse_k_list("2:3:10").unwrap(), vec![2, 5, 8]);
        assert_eq!(parse_k_list("10:3:2").unwrap(), vec![10, 7, 4]);
        assert_eq!(parse_k_list("1,5:6").unwrap(), vec![1, 5, 6]);
        assert!(parse_k_list("0").is_err());
        assert!(parse_k_list("3:0:5").is_err());
        assert!(parse_k_list("a").is_err());
        assert!(parse_k_list("1:2:3:4").is_err());
    }

    #[test]
    fn legacy_detection() {
        let v = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(is_legacy(&v(&["-loadFVFile", "x", "-maxK", "3"])));
        assert!(!is_legacy(&v(&["x.bb", "-k", "3"])));
    }
}
