//! The programs of `bbv bench simulate`'s study: real programs not written by us, chosen for
//! what breaks sampling (compilers, interpreters, a C++ program of virtual calls and pointers,
//! compressors, a database, a working set many times the LLC), each one command with inputs
//! made here. A program or input this machine lacks is named and skipped, not fatal.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::measure::{make_input, tool, Workload};

/// One program of the study.
pub struct Program {
    /// The command, its environment and its name in the table.
    pub workload: Workload,
    /// A billion instructions or more: intervals of 10 million (as users of runs this size
    /// take them), and left out unless named.
    pub large: bool,
}

/// Every `--only` name, small programs first.
pub const KEYS: [&str; 9] = [
    "gzip",
    "xz",
    "sqlite3",
    "python3",
    "cc1",
    "perl",
    "opt",
    "cc1-large",
    "xz-large",
];

/// A C file of zstd (the sources cargo fetched for this workspace: crate zstd-sys), by name.
fn zstd_source(name: &str) -> Result<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("no CARGO_HOME or HOME")?;
    let registry = home.join("registry/src");
    let mut found = Vec::new();
    for index in std::fs::read_dir(&registry).with_context(|| registry.display().to_string())? {
        for krate in std::fs::read_dir(index?.path())?.flatten() {
            let n = krate.file_name().to_string_lossy().into_owned();
            let file = krate.path().join("zstd/lib/compress").join(name);
            if n.starts_with("zstd-sys-") && file.is_file() {
                found.push(file);
            }
        }
    }
    found.sort();
    found.pop().with_context(|| {
        format!(
            "{name}: no zstd-sys sources under {} (cargo fetch)",
            registry.display()
        )
    })
}

/// Runs a preparation step natively; it must succeed.
fn prepare(argv: &[&str]) -> Result<()> {
    let o = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .with_context(|| format!("cannot run {}", argv[0]))?;
    if !o.status.success() {
        bail!(
            "{} failed: {}",
            argv.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(())
}

/// GCC's C compiler proper (`cc1`, or `cc1plus`), as the gcc driver names it.
fn gcc_part(part: &str) -> Result<String> {
    let o = Command::new(tool("gcc")?)
        .arg(format!("-print-prog-name={part}"))
        .output()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !Path::new(&p).is_file() {
        bail!("gcc's {part} not found (gcc -print-prog-name={part} gave {p:?})");
    }
    Ok(p)
}

/// `cc1 -O2` of zstd's `source`, preprocessed here.
fn cc1(root: &Path, source: &str) -> Result<Vec<String>> {
    let c = zstd_source(source)?;
    let i = root.join(source.replace(".c", ".i"));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    prepare(&[&s(&tool("gcc")?), "-E", "-P", &s(&c), "-o", &s(&i)])?;
    Ok(vec![
        gcc_part("cc1")?,
        "-fpreprocessed".into(),
        "-quiet".into(),
        "-O2".into(),
        s(&i),
        "-o".into(),
        "/dev/null".into(),
    ])
}

/// sqlite3 in memory running a script of SQL (20,000 rows at scale 1).
fn sqlite3(root: &Path, scale: f64) -> Result<Vec<String>> {
    let sql = root.join("q.sql");
    std::fs::write(
        &sql,
        format!(
            "create table t(a integer, b text);\n\
             with recursive n(i) as (select 1 union all select i + 1 from n where i < {})\n\
             insert into t select i, hex(i * 7919 % 100003) from n;\n\
             select count(*), sum(a) from t where b like '%A%';\n\
             select b, count(*) from t group by substr(b, 1, 2) order by 2 desc limit 3;\n",
            (20_000.0 * scale) as u64
        ),
    )?;
    Ok(vec![
        tool("sqlite3")?.to_string_lossy().into_owned(),
        ":memory:".into(),
        format!(".read {}", sql.display()),
    ])
}

/// LLVM's optimizer (C++: passes called through virtual functions over pointer-linked IR) on
/// zstd's C file as clang emits it.
fn opt(root: &Path) -> Result<Vec<String>> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let c = zstd_source("zstd_compress_sequences.c")?;
    let ll = root.join("sequences.ll");
    let clang = s(&tool("clang-14")?);
    let emit = ["-O0", "-Xclang", "-disable-O0-optnone", "-emit-llvm", "-S"];
    let mut argv = vec![clang.as_str()];
    argv.extend(emit);
    let (c, ll_s) = (s(&c), s(&ll));
    argv.extend([c.as_str(), "-o", ll_s.as_str()]);
    prepare(&argv)?;
    Ok(vec![
        s(&tool("opt-14")?),
        "-O2".into(),
        ll_s,
        "-o".into(),
        "/dev/null".into(),
    ])
}

/// The study's program `key` with inputs in `root` (`scale` multiplies the small ones').
pub fn program(key: &'static str, root: &Path, scale: f64) -> Result<Program> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let text = |name: &str, bytes: f64| -> Result<String> {
        let p = root.join(name);
        make_input(&p, bytes as usize)?;
        Ok(s(&p))
    };
    let (name, argv, env): (&str, Vec<String>, Vec<(&str, &str)>) = match key {
        "gzip" => (
            "gzip -9",
            vec![
                s(&tool("gzip")?),
                "-9".into(),
                "-c".into(),
                text("input.txt", 300_000.0 * scale)?,
            ],
            vec![],
        ),
        "xz" => (
            "xz -3",
            vec![
                s(&tool("xz")?),
                "-3".into(),
                "-T1".into(),
                "-c".into(),
                text("input.txt", 300_000.0 * scale)?,
            ],
            vec![],
        ),
        "sqlite3" => ("sqlite3 script", sqlite3(root, scale)?, vec![]),
        "python3" => {
            let script = format!(
                "d = {{}}\nfor i in range({}):\n    d[str(i * 7919 % 100003)] = i\n\
                 print(sum(sorted(d.values())[::97]))",
                (30_000.0 * scale) as u64
            );
            (
                "python3 script",
                vec![s(&crate::measure::python3()?), "-c".into(), script],
                vec![("PYTHONHASHSEED", "0")],
            )
        }
        "cc1" => (
            "cc1 -O2 zstd_compress_literals.c",
            cc1(root, "zstd_compress_literals.c")?,
            vec![],
        ),
        "perl" => {
            let script = format!(
                "my %h; for my $i (0..{}) {{ $h{{($i*7919)%100003}} .= \"x$i\" }} \
                 my $s = 0; for (sort keys %h) {{ $s += length $h{{$_}} }} print \"$s\\n\"",
                (20_000.0 * scale) as u64
            );
            (
                "perl script",
                vec![s(&tool("perl")?), "-e".into(), script],
                // Perl orders its hashes afresh each run: the replays would not be the run.
                vec![("PERL_HASH_SEED", "0"), ("PERL_PERTURB_KEYS", "0")],
            )
        }
        "opt" => (
            "opt -O2 (LLVM 14) zstd_compress_sequences.ll",
            opt(root)?,
            vec![],
        ),
        "cc1-large" => (
            "cc1 -O2 zstd_compress_sequences.c",
            cc1(root, "zstd_compress_sequences.c")?,
            vec![],
        ),
        "xz-large" => (
            "xz -6 (730 KB)",
            vec![
                s(&tool("xz")?),
                "-6".into(),
                "-T1".into(),
                "-c".into(),
                text("large.txt", 730_000.0)?,
            ],
            vec![],
        ),
        _ => bail!("{key}: not a program of the study ({})", KEYS.join(", ")),
    };
    Ok(Program {
        workload: Workload { name, argv, env },
        large: key.ends_with("-large"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program of the study is prepared and runs natively to exit 0 (the chain runs the
    /// same commands under QEMU).
    #[test]
    fn every_program_prepares_and_runs() {
        let root = tempfile::tempdir().unwrap();
        for key in KEYS {
            let p = program(key, root.path(), 0.05).unwrap_or_else(|e| panic!("{key}: {e:#}"));
            assert_eq!(p.large, key.ends_with("-large"));
            let w = &p.workload;
            let o = Command::new(&w.argv[0])
                .args(&w.argv[1..])
                .envs(w.env.iter().copied())
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{key}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(program("nope", root.path(), 1.0).is_err());
    }
}
