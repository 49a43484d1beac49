//! `bbv cc` / `bbv c++`: a compiler wrapper that builds programs with deterministic block
//! counting (the bbv-llvm pass and runtime, found next to `bbv` or in `$BBV_LLVM_DIR`).
//!
//! Each source goes: frontend with fixed flags (`-O2 -Xclang -disable-llvm-passes`, so the IR is
//! the same whatever -O the user asked for) -> `opt` with the pass -> the user's -O level and
//! code-generation flags -> object. Linking adds the runtime.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The header installed for programs (`#include "bbv.h"`).
const HEADER: &str = include_str!("../../llvm/runtime/include/bbv.h");

/// `bbv cc` / `bbv c++` options.
#[derive(clap::Args, Debug)]
pub struct CcArgs {
    /// total: per-thread totals and budgets; blocks: also per-block counts and BBV intervals;
    /// count: per-thread totals only, without budget checks (the cheapest).
    #[arg(long, value_name = "total|blocks|count", default_value = "total", value_parser = ["total", "blocks", "count"])]
    pub mode: String,
    /// Print the commands run.
    #[arg(short, long)]
    pub verbose: bool,
    /// The compiler (clang-14/15/16 or clang++-14/15/16) and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMPILER ARGS"
    )]
    pub command: Vec<OsString>,
}

/// Options whose value is the next argument.
const WITH_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-isysroot",
    "-MF",
    "-MT",
    "-MQ",
    "-x",
    "-Xclang",
    "-Xlinker",
    "-L",
    "-l",
    "-target",
    "--sysroot",
    "-arch",
    "-Xpreprocessor",
    "-Xassembler",
    "-z",
    "-T",
    "-u",
    "-e",
];

const SOURCE_EXT: &[&str] = &["c", "cc", "cp", "cxx", "cpp", "c++", "C", "CPP", "i", "ii"];

fn is_source(p: &Path) -> bool {
    p.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| SOURCE_EXT.contains(&e))
}

/// Where an argument goes.
#[derive(Clone, Copy, PartialEq)]
enum Dest {
    /// Preprocessing and language options: the frontend only.
    Front,
    /// Code generation (-m*, -f*, -g*, -target): frontend and back end.
    Both,
    /// Linker options.
    Link,
}

fn classify(a: &str) -> Dest {
    if a.starts_with("-l")
        || a.starts_with("-L")
        || a.starts_with("-Wl,")
        || a == "-Xlinker"
        || a == "-z"
        || a == "-T"
        || matches!(
            a,
            "-shared"
                | "-static"
                | "-pie"
                | "-no-pie"
                | "-rdynamic"
                | "-s"
                | "-nostdlib"
                | "-nostartfiles"
                | "-static-libgcc"
                | "-static-libstdc++"
                | "-u"
                | "-e"
        )
        || a.starts_with("-fuse-ld")
    {
        Dest::Link
    } else if a.starts_with("-m")
        || a.starts_with("-f")
        || a.starts_with("-g")
        || a == "-target"
        || a.starts_with("--target")
        || a == "-pthread"
        || a == "-arch"
        || a.starts_with("--sysroot")
    {
        Dest::Both
    } else {
        Dest::Front
    }
}

struct Tools {
    compiler: PathBuf,
    opt: PathBuf,
    plugin: PathBuf,
    runtime: PathBuf,
}

/// The LLVM majors whose pass `scripts/build` can build (llvm-plugin's levels).
const LLVM_MAJORS: [u32; 3] = [14, 15, 16];

/// The pass plugin's file for LLVM `major`: the workspace builds 14's, scripts/build the
/// others from their own target directories.
fn plugin_file(major: u32) -> String {
    if major == 14 {
        "libbbv_llvm.so".into()
    } else {
        format!("libbbv_llvm_{major}.so")
    }
}

/// The major version in clang's `--version` line (`Debian clang version 16.0.6 (15~deb12u1)`).
fn clang_major(first_line: &str) -> Option<u32> {
    let rest = first_line.split("clang version ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn find_tools(compiler: &OsStr) -> Result<Tools> {
    let name = compiler.to_string_lossy().into_owned();
    let path = if name.contains('/') {
        PathBuf::from(&name)
    } else {
        bbv_collect::find_on_path(&name).with_context(|| {
            format!("{name}: not found on PATH (apt-get install clang-16, or clang-14 or clang-15)")
        })?
    };
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", path.display()))?;
    let text = String::from_utf8_lossy(&version.stdout);
    let first = text.lines().next().unwrap_or("");
    let Some(major) = clang_major(first) else {
        bail!("{name} is not clang ({first:?}): bbv cc needs clang 14, 15 or 16 (clang-16 / clang++-16, ...)");
    };
    if !LLVM_MAJORS.contains(&major) {
        bail!(
            "{name} is clang {major} ({first:?}); bbv cc's pass is built for LLVM 14, 15 and 16: use clang-14, clang-15 or clang-16"
        );
    }
    // opt from the same LLVM installation as the compiler.
    let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
    let opt = real
        .parent()
        .map(|d| d.join("opt"))
        .filter(|p| p.is_file())
        .or_else(|| bbv_collect::find_on_path(&format!("opt-{major}")))
        .with_context(|| {
            format!("opt (LLVM {major}) not found next to the compiler nor as opt-{major} on PATH (apt-get install llvm-{major})")
        })?;
    let dir = match std::env::var_os("BBV_LLVM_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .context("cannot find the bbv binary's directory")?,
    };
    let plugin = dir.join(plugin_file(major));
    let runtime = dir.join("libbbv_llvm_runtime.a");
    if !plugin.is_file() {
        bail!(
            "{name} is clang {major}, but bbv's pass for LLVM {major} ({}) is not built: apt-get install llvm-{major}-dev, then scripts/build --workspace (or set BBV_LLVM_DIR)",
            plugin.display()
        );
    }
    if !runtime.is_file() {
        bail!(
            "the bbv LLVM runtime {} is missing: build it with scripts/build --workspace or set BBV_LLVM_DIR",
            runtime.display()
        );
    }
    Ok(Tools {
        compiler: path,
        opt,
        plugin,
        runtime,
    })
}

fn run(cmd: &mut Command, verbose: bool, what: &str) -> Result<()> {
    if verbose {
        let parts: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        eprintln!("bbv cc: {}", parts.join(" "));
    }
    let st = cmd
        .status()
        .with_context(|| format!("cannot run {}", cmd.get_program().to_string_lossy()))?;
    if !st.success() {
        bail!("{what} failed ({st})");
    }
    Ok(())
}

/// Runs the wrapper; `cxx` selects C++ linking defaults (informational: the compiler decides).
pub fn run_cc(a: CcArgs) -> Result<()> {
    let (compiler, args) = a.command.split_first().context("no compiler given")?;
    let args: Vec<String> = args
        .iter()
        .map(|s| {
            s.to_str()
                .map(str::to_string)
                .with_context(|| format!("argument {s:?} is not UTF-8"))
        })
        .collect::<Result<_>>()?;
    // Only preprocessing: nothing to instrument.
    if args.iter().any(|x| x == "-E" || x == "-M" || x == "-MM") {
        let tools = find_tools(compiler)?;
        let st = Command::new(&tools.compiler).args(&args).status()?;
        if !st.success() {
            bail!("the compiler failed ({st})");
        }
        return Ok(());
    }
    let tools = find_tools(compiler)?;
    let mut front: Vec<String> = Vec::new();
    let mut back: Vec<String> = Vec::new();
    let mut link: Vec<String> = Vec::new();
    // Inputs in order; sources are replaced by their objects at link time.
    let mut inputs: Vec<String> = Vec::new();
    let mut output: Option<String> = None;
    let mut level = "-O0".to_string();
    let (mut compile_only, mut asm_only, mut user_g) = (false, false, false);
    let mut dep_file = false;
    let mut i = 0;
    while i < args.len() {
        let x = &args[i];
        let value = || {
            args.get(i + 1)
                .cloned()
                .with_context(|| format!("{x} needs a value"))
        };
        match x.as_str() {
            "-c" => compile_only = true,
            "-S" => asm_only = true,
            "-o" => {
                output = Some(value()?);
                i += 1;
            }
            "-x" => bail!("-x is not supported by bbv cc: name sources by their extension"),
            "-emit-llvm" => bail!("-emit-llvm is not supported by bbv cc"),
            "-MD" | "-MMD" => {
                dep_file = true;
                front.push(x.clone());
            }
            s if s.starts_with("-O") => level = s.to_string(),
            s if s.starts_with("-o") && s.len() > 2 => output = Some(s[2..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => {
                if s.starts_with("-g") && s != "-g0" {
                    user_g = true;
                }
                let dest = classify(s);
                let mut group = vec![x.clone()];
                if WITH_VALUE.contains(&s) {
                    group.push(value()?);
                    i += 1;
                }
                match dest {
                    Dest::Front => front.extend(group),
                    Dest::Both => {
                        front.extend(group.iter().cloned());
                        back.extend(group.iter().cloned());
                        link.extend(group);
                    }
                    Dest::Link => {
                        // Keep -l/-L and friends in order with the inputs.
                        inputs.extend(group);
                    }
                }
            }
            _ => inputs.push(x.clone()),
        }
        i += 1;
    }
    let sources: Vec<String> = inputs
        .iter()
        .filter(|s| !s.starts_with('-') && is_source(Path::new(s)))
        .cloned()
        .collect();
    if sources.is_empty() && (compile_only || asm_only) {
        bail!("no C or C++ source among the inputs");
    }
    if (compile_only || asm_only) && sources.len() > 1 && output.is_some() {
        bail!("-o with -c or -S and several sources");
    }
    let tmp = tempfile::Builder::new()
        .prefix("bbv-cc-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    std::fs::write(tmp.path().join("bbv.h"), HEADER).context("cannot write bbv.h")?;
    let pass = format!("bbv-{},verify", a.mode);
    let mut objects: Vec<(String, PathBuf)> = Vec::new();
    for (n, src) in sources.iter().enumerate() {
        let stem = Path::new(src)
            .file_stem()
            .and_then(OsStr::to_str)
            .unwrap_or("out")
            .to_string();
        let bc = tmp.path().join(format!("{n}-{stem}.bc"));
        let ibc = tmp.path().join(format!("{n}-{stem}.bbv.bc"));
        let obj = if compile_only || asm_only {
            PathBuf::from(
                output
                    .clone()
                    .unwrap_or_else(|| format!("{stem}.{}", if asm_only { "s" } else { "o" })),
            )
        } else {
            tmp.path().join(format!("{n}-{stem}.o"))
        };
        let mut fe = Command::new(&tools.compiler);
        fe.args(&front);
        fe.arg("-I").arg(tmp.path());
        if dep_file && !front.iter().any(|f| f == "-MF") {
            fe.arg("-MF")
                .arg(obj.with_extension("d"))
                .arg("-MT")
                .arg(&obj);
        }
        // Line tables name where a budget ran out; they add no IR instruction.
        if !user_g {
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
        run(&mut fe, a.verbose, &format!("compiling {src}"))?;
        let mut opt = Command::new(&tools.opt);
        opt.arg(format!("-load-pass-plugin={}", tools.plugin.display()))
            .arg(format!("-passes={pass}"))
            .arg(&bc)
            .arg("-o")
            .arg(&ibc);
        run(&mut opt, a.verbose, &format!("instrumenting {src}"))?;
        let mut be = Command::new(&tools.compiler);
        be.args(&back)
            .arg(&level)
            .arg("-Qunused-arguments")
            .arg(if asm_only { "-S" } else { "-c" })
            .arg(&ibc)
            .arg("-o")
            .arg(&obj);
        run(
            &mut be,
            a.verbose,
            &format!("optimizing and generating code for {src}"),
        )?;
        objects.push((src.clone(), obj));
    }
    if compile_only || asm_only {
        return Ok(());
    }
    let mut ld = Command::new(&tools.compiler);
    ld.args(&link).arg(&level).arg("-Qunused-arguments");
    for x in &inputs {
        match objects.iter().find(|(s, _)| s == x) {
            Some((_, o)) => {
                ld.arg(o);
            }
            None => {
                ld.arg(x);
            }
        }
    }
    ld.arg(&tools.runtime);
    // What the Rust standard library in the runtime needs.
    ld.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]);
    ld.arg("-o").arg(output.unwrap_or_else(|| "a.out".into()));
    run(&mut ld, a.verbose, "linking")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clang_versions() {
        assert_eq!(
            clang_major("Debian clang version 16.0.6 (15~deb12u1)"),
            Some(16)
        );
        assert_eq!(clang_major("Debian clang version 14.0.6"), Some(14));
        assert_eq!(
            clang_major("clang version 18.1.8 (Fedora 18.1.8-1.fc40)"),
            Some(18)
        );
        assert_eq!(clang_major("gcc (Debian 12.2.0-14) 12.2.0"), None);
        assert_eq!(plugin_file(14), "libbbv_llvm.so");
        assert_eq!(plugin_file(16), "libbbv_llvm_16.so");
    }
}
