//! `bbv simpoint`'s configuration, whichever option style it came from, and SimPoint 3.2's
//! own command line (`-loadFVFile f -maxK 30 ...`), parsed as SimPoint spells it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::{Init, KChoice, Options, SimpointError, DEFAULT_DIM, DEFAULT_SEED_PROJ};

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

impl VectorSource {
    /// The file.
    pub fn path(&self) -> &Path {
        let (VectorSource::Fv(p) | VectorSource::Txt(p) | VectorSource::Bin(p)) = self;
        p
    }
}

/// Everything `bbv simpoint` needs, whichever option style it came from. The SimPoint 3.2
/// option each field stands for is named beside it.
#[derive(Clone, Debug)]
pub struct Config {
    /// `-loadFVFile`, `-loadVectorsTxtFmt`, `-loadVectorsBinFmt`.
    pub input: VectorSource,
    /// The clustering's options (`-k`, `-maxK`, `-iters`, `-numInitSeeds`, seeds, ...).
    pub opts: Options,
    /// `-dim`; None = noProject.
    pub dim: Option<usize>,
    /// `-seedproj`.
    pub seed_proj: i32,
    /// `-loadProjMatrixTxtFmt` (false) or `-loadProjMatrixBinFmt` (true).
    pub load_proj: Option<(PathBuf, bool)>,
    /// `-loadInitCtrs`.
    pub load_init_ctrs: Option<PathBuf>,
    /// `-loadInitLabels`.
    pub load_init_labels: Option<PathBuf>,
    /// `-loadVectorWeights`.
    pub load_vector_weights: Option<PathBuf>,
    /// `-fixedLength`; None = not given (on by default).
    pub fixed_length: Option<bool>,
    /// `-coveragePct`.
    pub coverage: f64,
    /// `-saveAll`.
    pub save_all: bool,
    /// `-numFVs`: the number of vectors the input must hold.
    pub num_fvs: Option<usize>,
    /// `-FVDim`: the largest block id the input must have.
    pub fv_dim: Option<usize>,
    /// `-saveSimpoints`.
    pub save_simpoints: Option<PathBuf>,
    /// `-saveSimpointWeights`.
    pub save_weights: Option<PathBuf>,
    /// `-saveLabels`.
    pub save_labels: Option<PathBuf>,
    /// `-saveVectorWeights`.
    pub save_vector_weights: Option<PathBuf>,
    /// `-saveInitCtrs`.
    pub save_init_ctrs: Option<PathBuf>,
    /// `-saveFinalCtrs`.
    pub save_final_ctrs: Option<PathBuf>,
    /// `-saveVectorsTxtFmt`.
    pub save_vectors_txt: Option<PathBuf>,
    /// `-saveVectorsBinFmt`.
    pub save_vectors_bin: Option<PathBuf>,
    /// `-saveProjMatrixTxtFmt`.
    pub save_proj_txt: Option<PathBuf>,
    /// `-saveProjMatrixBinFmt`.
    pub save_proj_bin: Option<PathBuf>,
    /// Print SimPoint's style of log on stdout.
    pub log: bool,
    /// Print the result as JSON on stdout.
    pub json: bool,
    /// Print a short summary when nothing else goes to stdout.
    pub summary: bool,
}

impl Config {
    /// SimPoint's defaults, reading `input`.
    pub fn new(input: VectorSource) -> Config {
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
pub fn parse_k_list(text: &str) -> Result<Vec<usize>, SimpointError> {
    let mut ks = Vec::new();
    for part in text.split(',') {
        let nums: Vec<i64> = part
            .split(':')
            .map(|p| {
                p.trim().parse::<i64>().map_err(|e| {
                    SimpointError::Invalid(format!(
                        "bad k list '{text}': '{p}' is not an integer: {e}"
                    ))
                })
            })
            .collect::<Result<_, SimpointError>>()?;
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

fn parse_num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T, SimpointError> {
    v.parse()
        .map_err(|_| SimpointError::Invalid(format!("option {opt}: '{v}' is not a valid number")))
}

fn parse_seed(opt: &str, v: &str) -> Result<i32, SimpointError> {
    parse_num::<i32>(opt, v)
}

/// An iteration limit (`-iters`, `--iters`): a count, or `off` for no limit.
pub fn parse_iters(opt: &str, v: &str) -> Result<usize, SimpointError> {
    if v == "off" {
        return Ok(i32::MAX as usize);
    }
    let n: i64 = parse_num(opt, v)?;
    if n < 0 {
        bail!("option {opt}: must be 0 or more, or 'off'");
    }
    Ok(n as usize)
}

/// A projected dimension (`-dim`, `--dim`): a count, or `noProject` / `none` for none.
pub fn parse_dim(opt: &str, v: &str) -> Result<Option<usize>, SimpointError> {
    if v == "noProject" || v == "none" {
        return Ok(None);
    }
    let d: usize = parse_num(opt, v)?;
    if d == 0 {
        bail!("option {opt}: the dimension must be at least 1 (or noProject)");
    }
    Ok(Some(d))
}

/// The error for an argument SimPoint 3.2 does not know: a bare file name gets the two ways
/// of writing it.
fn unknown(arg: &str) -> SimpointError {
    SimpointError::Invalid(if arg.starts_with('-') {
        format!("unknown option '{arg}' (SimPoint 3.2 would ignore it; run 'bbv simpoint --help')")
    } else {
        format!(
            "'{arg}': a file given without -loadFVFile, among SimPoint 3.2's options; write \
             `bbv simpoint -loadFVFile {arg} ...` with SimPoint's options, or `bbv simpoint \
             {arg} --max-k K ...` with bbv's (see 'bbv simpoint --help')"
        )
    })
}

/// A fraction from 0 (or above 0 unless `allow_zero`) to 1 (`-coveragePct`, `-bicThreshold`).
pub fn parse_unit(opt: &str, v: &str, allow_zero: bool) -> Result<f64, SimpointError> {
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

fn parse_positive(opt: &str, v: &str) -> Result<usize, SimpointError> {
    let n: usize = parse_num(opt, v)?;
    if n == 0 {
        bail!("option {opt}: must be at least 1");
    }
    Ok(n)
}

/// Parses SimPoint 3.2's command line (without the program name).
pub fn parse_legacy(args: &[OsString]) -> Result<Config, SimpointError> {
    let mut cfg = Config::new(VectorSource::Fv(PathBuf::new()));
    let mut source: Option<VectorSource> = None;
    let mut k_text: Option<String> = None;
    let mut max_k: Option<usize> = None;
    cfg.log = true;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_str().ok_or_else(|| {
            SimpointError::Invalid(format!("argument {:?} is not valid UTF-8", args[i]))
        })?;
        i += 1;
        if LEGACY_FLAGS.contains(&arg) {
            if arg == "-saveAll" {
                cfg.save_all = true;
            }
            continue;
        }
        if !LEGACY_VALUED.contains(&arg) {
            return Err(unknown(arg));
        }
        let value = args
            .get(i)
            .ok_or_else(|| SimpointError::Invalid(format!("option {arg} needs a value")))?
            .to_str()
            .ok_or_else(|| {
                SimpointError::Invalid(format!("option {arg}: value is not valid UTF-8"))
            })?
            .to_string();
        i += 1;
        let path = || PathBuf::from(&value);
        let mut set_source = |s: VectorSource| -> Result<(), SimpointError> {
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
    cfg.input = source.ok_or_else(|| {
        SimpointError::Invalid(
            "no input: give -loadFVFile FILE (or -loadVectorsTxtFmt / -loadVectorsBinFmt)".into(),
        )
    })?;
    cfg.opts.k = resolve_k(k_text.as_deref(), max_k, "-maxK")?;
    Ok(cfg)
}

/// The k values to try: SimPoint's search up to the maximum named `max_name`, or an explicit
/// `-k` list (the two exclude each other).
pub fn resolve_k(
    k_text: Option<&str>,
    max_k: Option<usize>,
    max_name: &str,
) -> Result<KChoice, SimpointError> {
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
