//! The compiler driver of `bbv cc` / `bbv c++`: builds programs with deterministic block
//! counting (the bbv-llvm pass and runtime, found next to `bbv` or in `$BBV_LLVM_DIR`).
//!
//! Each source goes: frontend with fixed flags (`-O2 -Xclang -disable-llvm-passes`, so the IR is
//! the same whatever -O the user asked for) -> `opt` with the pass -> the user's -O level and
//! code-generation flags -> object. Linking adds the runtime.

/// `return Err(CcError::Invalid(format!(...)))`.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::CcError::Invalid(format!($($t)*)))
    };
}

mod args;
mod tools;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use args::Plan;
use tools::Tools;

/// The header installed for programs (`#include "bbv.h"`).
const HEADER: &str = include_str!("../../llvm/runtime/include/bbv.h");

/// What can go wrong building with `bbv cc`.
#[derive(Debug, thiserror::Error)]
pub enum CcError {
    /// Arguments bbv cc cannot honour, or a tool that is missing.
    #[error("{0}")]
    Invalid(String),
    /// A tool could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A step of the build failed; the tool printed why.
    #[error("{what} failed ({status})")]
    Failed {
        /// The step.
        what: String,
        /// Its exit status.
        status: ExitStatus,
    },
    /// A temporary file or folder could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The compiler could not be started to preprocess.
    #[error(transparent)]
    Preprocess(std::io::Error),
}

/// What counting the program's builds carry (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Per-thread totals and budgets.
    Total,
    /// Also per-block counts and BBV intervals.
    Blocks,
    /// Per-thread totals only, without budget checks (the cheapest).
    Count,
}

impl Mode {
    /// The pass's name for this mode.
    fn pass(self) -> &'static str {
        match self {
            Mode::Total => "bbv-total",
            Mode::Blocks => "bbv-blocks",
            Mode::Count => "bbv-count",
        }
    }
}

/// One `bbv cc` command: the compiler and its arguments, as the user would run them.
#[derive(Clone, Debug)]
pub struct Request {
    /// The counting built in.
    pub mode: Mode,
    /// Print the commands run (on stderr).
    pub verbose: bool,
    /// The compiler (clang-14/15/16 or clang++-14/15/16) and its arguments.
    pub command: Vec<OsString>,
}

/// Runs one compiler command with instrumentation: compiles, assembles or links as its
/// arguments ask.
pub fn build(req: &Request) -> Result<(), CcError> {
    let (compiler, args) = req
        .command
        .split_first()
        .ok_or_else(|| CcError::Invalid("no compiler given".into()))?;
    let args: Vec<String> = args
        .iter()
        .map(|s| {
            s.to_str()
                .map(str::to_string)
                .ok_or_else(|| CcError::Invalid(format!("argument {s:?} is not UTF-8")))
        })
        .collect::<Result<_, _>>()?;
    // Only preprocessing: nothing to instrument.
    if args.iter().any(|x| x == "-E" || x == "-M" || x == "-MM") {
        let tools = tools::find_tools(compiler)?;
        let mut cmd = Command::new(&tools.compiler);
        bbv_files::interrupt::dies_with_bbv(&mut cmd);
        let st = cmd.args(&args).status().map_err(CcError::Preprocess)?;
        if !st.success() {
            bail!("the compiler failed ({st})");
        }
        return Ok(());
    }
    let tools = tools::find_tools(compiler)?;
    let plan = args::plan(&args)?;
    let sources = plan.sources();
    let partial = plan.compile_only || plan.asm_only;
    if sources.is_empty() && partial {
        bail!("no C or C++ source among the inputs");
    }
    if partial && sources.len() > 1 && plan.output.is_some() {
        bail!("-o with -c or -S and several sources");
    }
    // Registered so that a killed bbv removes it (and its compilers die with it, see `run`).
    let (tmp, _cleanup) = bbv_files::interrupt::Cleanup::create(|| {
        let dir = tempfile::Builder::new().prefix("bbv-cc-").tempdir()?;
        let path = dir.path().to_path_buf();
        Ok((dir, path))
    })
    .map_err(|source| CcError::Io {
        what: "cannot create a temporary directory".into(),
        source,
    })?;
    std::fs::write(tmp.path().join("bbv.h"), HEADER).map_err(|source| CcError::Io {
        what: "cannot write bbv.h".into(),
        source,
    })?;
    let mut objects: Vec<(String, PathBuf)> = Vec::new();
    for (n, src) in sources.iter().enumerate() {
        let obj = compile(req, &tools, &plan, tmp.path(), n, src)?;
        objects.push((src.clone(), obj));
    }
    if partial {
        return Ok(());
    }
    link(req, &tools, plan, &objects)
}

/// Frontend, pass and back end for source number `n`; returns its object (or assembly).
fn compile(
    req: &Request,
    tools: &Tools,
    plan: &Plan,
    tmp: &Path,
    n: usize,
    src: &str,
) -> Result<PathBuf, CcError> {
    let stem = Path::new(src)
        .file_stem()
        .and_then(OsStr::to_str)
        .unwrap_or("out")
        .to_string();
    let bc = tmp.join(format!("{n}-{stem}.bc"));
    let ibc = tmp.join(format!("{n}-{stem}.bbv.bc"));
    let obj = if plan.compile_only || plan.asm_only {
        let ext = if plan.asm_only { "s" } else { "o" };
        PathBuf::from(
            plan.output
                .clone()
                .unwrap_or_else(|| format!("{stem}.{ext}")),
        )
    } else {
        tmp.join(format!("{n}-{stem}.o"))
    };
    let mut fe = Command::new(&tools.compiler);
    fe.args(&plan.front);
    fe.arg("-I").arg(tmp);
    if plan.dep_file && !plan.front.iter().any(|f| f == "-MF") {
        fe.arg("-MF")
            .arg(obj.with_extension("d"))
            .arg("-MT")
            .arg(&obj);
    }
    // Line tables name where a budget ran out; they add no IR instruction.
    if !plan.user_g {
        fe.arg("-gline-tables-only");
    }
    fe.args([
        "-O2",
        "-Xclang",
        "-disable-llvm-passes",
        "-emit-llvm",
        "-c",
        src,
        "-o",
    ])
    .arg(&bc);
    run(&mut fe, req.verbose, &format!("compiling {src}"))?;
    let mut opt = Command::new(&tools.opt);
    opt.arg(format!("-load-pass-plugin={}", tools.plugin.display()))
        .arg(format!("-passes={},verify", req.mode.pass()))
        .arg(&bc)
        .arg("-o")
        .arg(&ibc);
    run(&mut opt, req.verbose, &format!("instrumenting {src}"))?;
    let mut be = Command::new(&tools.compiler);
    be.args(&plan.back)
        .arg(&plan.level)
        .arg("-Qunused-arguments")
        .arg(if plan.asm_only { "-S" } else { "-c" })
        .arg(&ibc)
        .arg("-o")
        .arg(&obj);
    let what = format!("optimizing and generating code for {src}");
    run(&mut be, req.verbose, &what)?;
    Ok(obj)
}

/// Links the objects with the other inputs, in the user's order, and the runtime.
fn link(
    req: &Request,
    tools: &Tools,
    plan: Plan,
    objects: &[(String, PathBuf)],
) -> Result<(), CcError> {
    let mut ld = Command::new(&tools.compiler);
    ld.args(&plan.link)
        .arg(&plan.level)
        .arg("-Qunused-arguments");
    for x in &plan.inputs {
        match objects.iter().find(|(s, _)| s == x) {
            Some((_, o)) => ld.arg(o),
            None => ld.arg(x),
        };
    }
    ld.arg(&tools.runtime);
    // What the Rust standard library in the runtime needs.
    ld.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]);
    ld.arg("-o")
        .arg(plan.output.unwrap_or_else(|| "a.out".into()));
    run(&mut ld, req.verbose, "linking")
}

fn run(cmd: &mut Command, verbose: bool, what: &str) -> Result<(), CcError> {
    if verbose {
        let parts: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        eprintln!("bbv cc: {}", parts.join(" "));
    }
    bbv_files::interrupt::dies_with_bbv(cmd);
    let st = cmd.status().map_err(|source| CcError::Spawn {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    if !st.success() {
        return Err(CcError::Failed {
            what: what.to_string(),
            status: st,
        });
    }
    Ok(())
}
