//! `bbv cc` / `bbv c++`: deterministic counts across optimisation levels and runs, budgets,
//! counts equal to the IR computed independently, programs unchanged, blocks mode, bad input.
//!
//! Needs clang-14 and clang-16 with their opt, and the passes and runtime built next to `bbv`
//! (scripts/test builds them with `scripts/build --workspace`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::bbv;

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/guests")
        .join(name)
}

fn llvm_built() {
    let dir = Path::new(env!("CARGO_BIN_EXE_bbv"))
        .parent()
        .unwrap()
        .to_path_buf();
    for f in [
        "libbbv_llvm.so",
        "libbbv_llvm_15.so",
        "libbbv_llvm_16.so",
        "libbbv_llvm_runtime.a",
    ] {
        assert!(
            dir.join(f).is_file(),
            "{f} is missing next to bbv: `scripts/build --workspace` (scripts/test does)"
        );
    }
}

/// `bbv cc|c++ [--mode M] -- COMPILER ARGS`, which must succeed.
fn cc(dir: &Path, driver: &str, mode: &str, compiler: &str, args: &[&str]) {
    llvm_built();
    let out = bbv()
        .current_dir(dir)
        .args([driver, "--mode", mode, "--", compiler])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bbv {driver} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(dir: &Path, prog: &str, env: &[(&str, &str)]) -> Output {
    Command::new(dir.join(prog))
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn count_file(path: &Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// stdout, stderr, status and the count file of one run.
type Observed = (Vec<u8>, Vec<u8>, Option<i32>, String);

/// A program, its compiler, its exit status and its path: (function, block, executions).
type Case<'a> = (&'a str, &'a str, i32, Vec<(&'a str, &'a str, u64)>);

#[test]
fn budget_verdict_is_the_same_at_every_level_and_run() {
    // Counts differ between LLVM versions (their frontends emit other IR), never within one.
    let mut turn1 = Vec::new();
    for compiler in ["clang-14", "clang-15", "clang-16"] {
        let stdout = budget_verdict_with(compiler);
        turn1.push(stdout.lines().next().unwrap_or("").to_string());
    }
    assert_ne!(
        turn1[0], turn1[2],
        "LLVM 14 and 16 counted alike: is 16's pass in use?"
    );
}

#[test]
fn every_level_counts_alike() {
    // levels.c's constructs, atoi from glibc's headers among them, at -O0..-Os with each
    // LLVM: one count file and one output per compiler, for two input sizes.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = guest("levels.c");
    for compiler in ["clang-14", "clang-15", "clang-16"] {
        for n in ["500", "2000"] {
            let mut seen: Option<(Vec<u8>, String)> = None;
            for level in ["-O0", "-O1", "-O2", "-O3", "-Os"] {
                cc(
                    d,
                    "cc",
                    "total",
                    compiler,
                    &[level, "-o", "l", src.to_str().unwrap()],
                );
                let out = Command::new(d.join("l"))
                    .arg(n)
                    .env("BBV_OUT", d.join("l"))
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{compiler} {level}");
                let now = (
                    out.stdout,
                    std::fs::read_to_string(d.join("l.count")).unwrap(),
                );
                match &seen {
                    None => seen = Some(now),
                    Some(first) => assert!(
                        first == &now,
                        "{compiler} {level} n = {n}: {} against -O0's {}",
                        now.1,
                        first.1
                    ),
                }
            }
        }
    }
}

/// budget.c built with `compiler` at every level, run twice each: one verdict; its stdout.
fn budget_verdict_with(compiler: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = guest("budget.c");
    let mut seen: Option<Observed> = None;
    for (i, flags) in [
        &["-O0"][..],
        &["-O1"],
        &["-O2"],
        &["-O3"],
        &["-Os"],
        &["-O2", "-march=x86-64-v3"],
        &["-O2", "-g"],
    ]
    .iter()
    .enumerate()
    {
        let exe = format!("b{i}");
        let mut args: Vec<&str> = flags.to_vec();
        args.extend(["-o", &exe, src.to_str().unwrap()]);
        cc(d, "cc", "total", compiler, &args);
        for _ in 0..2 {
            let out = run(d, &exe, &[("BBV_OUT", "b")]);
            let counts = std::fs::read_to_string(d.join("b.count")).unwrap();
            let now = (out.stdout, out.stderr, out.status.code(), counts);
            match &seen {
                None => seen = Some(now),
                Some(first) => assert!(
                    first == &now,
                    "{compiler} {flags:?} differs: {:?}",
                    String::from_utf8_lossy(&now.1)
                ),
            }
        }
    }
    let (stdout, stderr, status, _) = seen.unwrap();
    assert_eq!(status, Some(152), "128 + SIGXCPU");
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(stdout.starts_with("turn 1: "), "{stdout}");
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(
        stderr.contains("instruction budget of 20000 exhausted in think at ")
            && stderr.contains("budget.c:"),
        "{stderr}"
    );
    stdout.into_owned()
}

/// Instructions per (function, block label) of a source's frontend IR, computed from the IR text
/// as `bbv cc` produces it (same flags; value names kept only to know the blocks).
fn ir_counts(d: &Path, compiler: &str, src: &Path) -> HashMap<(String, String), u64> {
    let ll = d.join("x.ll");
    let st = Command::new(compiler)
        .args([
            "-O2",
            "-Xclang",
            "-disable-llvm-passes",
            "-gline-tables-only",
            "-fno-discard-value-names",
            "-S",
            "-emit-llvm",
            "-o",
        ])
        .arg(&ll)
        .arg(src)
        .status()
        .unwrap();
    assert!(st.success());
    let text = std::fs::read_to_string(&ll).unwrap();
    let mut out = HashMap::new();
    let (mut func, mut label) = (String::new(), String::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("define ") {
            let at = rest.find('@').unwrap();
            func = rest[at + 1..]
                .split('(')
                .next()
                .unwrap()
                .trim_matches('"')
                .to_string();
            label = "entry".into();
        } else if line == "}" {
            func.clear();
        } else if !func.is_empty()
            && !line.starts_with(' ')
            && line.contains(':')
            && !line.starts_with(';')
        {
            label = line.split(':').next().unwrap().to_string();
        } else if !func.is_empty()
            && line.starts_with("  ")
            && !line[2..].starts_with(' ')
            && !line.starts_with("  ]")
            && !line.contains("call void @llvm.dbg.")
        {
            *out.entry((func.clone(), label.clone())).or_insert(0) += 1;
        }
    }
    out
}

fn expected(ir: &HashMap<(String, String), u64>, path: &[(&str, &str, u64)]) -> u64 {
    path.iter()
        .map(|&(f, l, times)| {
            let n = ir
                .get(&(f.to_string(), l.to_string()))
                .unwrap_or_else(|| panic!("no block {f}:{l} in {ir:?}"));
            n * times
        })
        .sum()
}

#[test]
fn a_budget_handler_that_returns_lets_the_run_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut seen = None;
    for level in ["-O0", "-O2"] {
        cc(
            d,
            "cc",
            "total",
            "clang-14",
            &[level, "-o", "h", guest("handler.c").to_str().unwrap()],
        );
        let out = run(d, "h", &[]);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("over budget at ")
                && lines[0].contains(" in spin (")
                && lines[0].contains("handler.c:"),
            "{text}"
        );
        assert_eq!(lines[1], "finished 14995");
        match &seen {
            None => seen = Some(text),
            Some(t) => assert_eq!(t, &text, "{level}"),
        }
    }
}

#[test]
fn counts_equal_the_ir_including_blocks_left_early() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A block is counted in full when it is entered: one left early by longjmp, exit() or an
    // exception counts all its instructions.
    let cases: [Case; 4] = [
        (
            "known_loop.c",
            "clang-14",
            0,
            vec![
                ("loop", "entry", 1),
                ("loop", "for.cond", 11),
                ("loop", "for.body", 10),
                ("loop", "for.inc", 10),
                ("loop", "for.cond.cleanup", 1),
                ("loop", "for.end", 1),
                ("main", "entry", 1),
                ("main", "if.end", 1),
                ("main", "return", 1),
            ],
        ),
        (
            "known_longjmp.c",
            "clang-14",
            0,
            vec![
                ("deep_jump", "entry", 4),
                ("deep_jump", "if.then", 1),
                ("deep_jump", "if.end", 3),
                ("main", "entry", 1),
                ("main", "if.then", 1),
                ("main", "if.end", 1),
            ],
        ),
        (
            "known_exit.c",
            "clang-14",
            3,
            vec![
                ("deep_exit", "entry", 4),
                ("deep_exit", "if.then", 1),
                ("deep_exit", "if.end", 3),
                ("main", "entry", 1),
            ],
        ),
        (
            "throw.cc",
            "clang++-14",
            0,
            vec![
                ("_Z4deepi", "entry", 4),
                ("_Z4deepi", "if.then", 1),
                ("_Z4deepi", "invoke.cont", 1),
                ("_Z4deepi", "if.end", 3),
                ("main", "entry", 1),
                ("main", "lpad", 1),
                ("main", "catch.dispatch", 1),
                ("main", "catch", 1),
                ("main", "invoke.cont2", 1),
                ("main", "try.cont", 1),
            ],
        ),
    ];
    // The same paths under LLVM 16, against its own IR.
    let newer: Vec<Case> = cases
        .iter()
        .map(|(src, compiler, status, path)| {
            let c = if compiler.contains("++") {
                "clang++-16"
            } else {
                "clang-16"
            };
            (*src, c, *status, path.clone())
        })
        .collect();
    for (src, compiler, status, path) in cases.into_iter().chain(newer) {
        let ir = ir_counts(d, compiler, &guest(src));
        let want = expected(&ir, &path);
        let driver = if compiler.contains("++") { "c++" } else { "cc" };
        for level in ["-O0", "-O2"] {
            cc(
                d,
                driver,
                "total",
                compiler,
                &[level, "-o", "k", guest(src).to_str().unwrap()],
            );
            let out = run(d, "k", &[("BBV_OUT", "k")]);
            assert_eq!(out.status.code(), Some(status), "{src}");
            let got = count_file(&d.join("k.count"));
            assert_eq!(got["total"], want, "{src} at {level}: counted vs IR");
        }
    }
}

#[test]
fn programs_behave_as_built_natively() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../llvm/runtime/include");
    let inc = format!("-I{}", inc.display());
    for (src, compiler, driver) in [
        ("gotos.c", "clang-14", "cc"),
        ("threads4.c", "clang-14", "cc"),
        ("throw.cc", "clang++-14", "c++"),
    ] {
        let s = guest(src);
        cc(
            d,
            driver,
            "blocks",
            compiler,
            &["-O2", "-pthread", "-o", "inst", s.to_str().unwrap()],
        );
        let inst = run(d, "inst", &[]);
        if src == "threads4.c" {
            // The native build has no runtime: only the checksum is compared.
            assert!(inst.status.success());
            assert_eq!(String::from_utf8_lossy(&inst.stdout), "checksum 599940\n");
            continue;
        }
        let st = Command::new(compiler)
            .current_dir(d)
            .args(["-O2", &inc, "-o", "native"])
            .arg(&s)
            .status()
            .unwrap();
        assert!(st.success());
        let native = run(d, "native", &[]);
        assert_eq!(inst.stdout, native.stdout, "{src}");
        assert_eq!(inst.status.code(), native.status.code(), "{src}");
    }
}

#[test]
fn four_threads_counted_apart_and_alike_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = guest("threads4.c");
    let mut first: Option<HashMap<String, u64>> = None;
    for level in ["-O0", "-O2", "-O3"] {
        cc(
            d,
            "cc",
            "total",
            "clang-14",
            &[level, "-pthread", "-o", "t", s.to_str().unwrap()],
        );
        for _ in 0..2 {
            let out = run(d, "t", &[("BBV_OUT", "t")]);
            assert!(out.status.success());
            let c = count_file(&d.join("t.count"));
            assert_eq!(c.len(), 5, "total and 4 threads: {c:?}");
            assert_eq!(
                c["total"],
                (1..=4).map(|n| c[&format!("thread {n}")]).sum::<u64>()
            );
            // Worker i runs (i + 1) x 10,000 iterations of the same loop.
            let w: Vec<u64> = (2..=4).map(|n| c[&format!("thread {n}")]).collect();
            assert_eq!(w[1] - w[0], w[2] - w[1], "{c:?}");
            match &first {
                None => first = Some(c),
                Some(f) => assert_eq!(f, &c, "{level}"),
            }
        }
    }
}

#[test]
fn blocks_mode_writes_a_bbv_simpoint_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    cc(
        d,
        "cc",
        "blocks",
        "clang-14",
        &["-O2", "-o", "b", guest("budget.c").to_str().unwrap()],
    );
    // The program's own per-turn budget ends the run, as in total mode; the files are complete.
    let out = run(d, "b", &[("BBV_OUT", "p"), ("BBV_INTERVAL", "2000")]);
    assert_eq!(out.status.code(), Some(152));
    let counts = count_file(&d.join("p.count"));
    let pc = std::fs::read_to_string(d.join("p.pc")).unwrap();
    assert!(
        pc.lines()
            .any(|l| l.contains(" think ") && l.contains("budget.c:")),
        "{pc}"
    );
    let bb = std::fs::read_to_string(d.join("p.bb")).unwrap();
    let lines: Vec<&str> = bb.lines().filter(|l| l.starts_with('T')).collect();
    assert!(
        lines.len() as u64 >= counts["total"] / 2000 - 1,
        "{} vectors",
        lines.len()
    );
    let sums: Vec<u64> = lines
        .iter()
        .map(|l| {
            l[1..]
                .split_whitespace()
                .map(|p| p.rsplit(':').next().unwrap().parse::<u64>().unwrap())
                .sum()
        })
        .collect();
    // Cut i falls at the end of the block that reaches i x 2000 instructions: no drift.
    let mut at = 0;
    for (i, s) in sums.iter().enumerate() {
        at += s;
        let want = (i as u64 + 1) * 2000;
        assert!(at >= want && at < want + 50, "cut {i} at {at}: {sums:?}");
    }
    let out = bbv()
        .current_dir(d)
        .args(["simpoint", "p.bb", "--max-k", "3", "-o", "sp"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_compilers_and_environments_are_refused() {
    llvm_built();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = guest("budget.c");
    let s = src.to_str().unwrap();
    let fails = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let out = bbv()
            .current_dir(d)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    fails(&["cc", "--", "gcc", "-o", "x", s], &[], "not clang");
    use std::os::unix::fs::PermissionsExt;
    let fake = |name: &str, says: &str| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{says}'\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let clang17 = fake("clang-17", "Debian clang version 17.0.6");
    fails(
        &["cc", "--", clang17.to_str().unwrap(), "-o", "x", s],
        &[],
        "built for LLVM 14, 15 and 16",
    );
    // A clang whose pass is not built (15 here: a pass folder holding LLVM 14's alone; its opt
    // is found next to it).
    let clang15 = fake("clang-15", "Debian clang version 15.0.6");
    fake("opt", "");
    let only14 = d.join("only14");
    std::fs::create_dir(&only14).unwrap();
    let release = std::path::Path::new(env!("CARGO_BIN_EXE_bbv"))
        .parent()
        .unwrap()
        .to_path_buf();
    for f in ["libbbv_llvm.so", "libbbv_llvm_runtime.a"] {
        std::fs::copy(release.join(f), only14.join(f)).unwrap();
    }
    fails(
        &["cc", "--", clang15.to_str().unwrap(), "-o", "x", s],
        &[("BBV_LLVM_DIR", only14.to_str().unwrap())],
        "apt-get install llvm-15-dev",
    );
    fails(
        &["cc", "--", "clang-14", "-o", "x", s],
        &[("BBV_LLVM_DIR", "/nonexistent")],
        "BBV_LLVM_DIR",
    );
    fails(&["cc", "--mode", "fast", "--", "clang-14", s], &[], "fast");
    fails(
        &["cc", "--", "clang-14", "-c", "-o", "x.o", s, s],
        &[],
        "several sources",
    );
    assert!(
        !d.join("x").exists(),
        "no uninstrumented binary left behind"
    );
    // A syntax error is the compiler's to report; bbv exits 2 and builds nothing.
    std::fs::write(d.join("bad.c"), "int main( { return 0; }\n").unwrap();
    fails(
        &["cc", "--", "clang-14", "-o", "x", "bad.c"],
        &[],
        "compiling bad.c failed",
    );
    cc(d, "cc", "total", "clang-14", &["-O1", "-o", "b", s]);
    for (k, v, says) in [
        ("BBV_BUDGET", "0", "BBV_BUDGET=0"),
        ("BBV_BUDGET", "lots", "BBV_BUDGET=lots"),
        ("BBV_INTERVAL", "-5", "BBV_INTERVAL=-5"),
        ("BBV_OUT", "/nonexistent/dir/p", "does not exist"),
    ] {
        let out = run(d, "b", &[(k, v)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{k}={v}: {err}");
        assert!(err.contains(says), "{err}");
        assert!(out.stdout.is_empty(), "stopped before main");
    }
}

#[test]
fn works_as_cc_in_a_makefile() {
    llvm_built();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("main.c"),
        "#include <stdio.h>\n#include \"bbv.h\"\nint helper(int);\nint main(void) { int s = helper(100); printf(\"%d %llu\\n\", s, (unsigned long long)bbv_count()); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("helper.c"),
        "int helper(int x) { int s = 0; for (int i = 0; i < x; i++) s += i; return s; }\n",
    )
    .unwrap();
    let bbv = env!("CARGO_BIN_EXE_bbv");
    std::fs::write(
        d.join("Makefile"),
        format!("CC = {bbv} cc -- clang-14\nCFLAGS = -O2 -Wall\nprog: main.o helper.o\n\t$(CC) $(CFLAGS) -o$@ main.o helper.o -lm\n%.o: %.c\n\t$(CC) $(CFLAGS) -MD -c $< -o $@\n"),
    )
    .unwrap();
    let st = Command::new("make")
        .arg("-s")
        .current_dir(d)
        .status()
        .expect("make runs");
    assert!(st.success());
    assert!(
        d.join("main.d").is_file() && d.join("helper.d").is_file(),
        "-MD dependency files"
    );
    let out = run(d, "prog", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let (sum, count) = text.trim().split_once(' ').unwrap();
    assert_eq!(sum, "4950");
    assert!(
        count.parse::<u64>().unwrap() > 100 * 4,
        "helper's loop was counted: {text}"
    );
}

#[test]
fn count_mode_counts_as_total_mode_and_refuses_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for compiler in ["clang-14", "clang-15", "clang-16"] {
        for src in ["threads4.c", "known_longjmp.c", "gotos.c"] {
            let s = guest(src);
            let s = s.to_str().unwrap();
            cc(
                d,
                "cc",
                "total",
                compiler,
                &["-O2", "-pthread", "-o", "t", s],
            );
            let total = run(d, "t", &[("BBV_OUT", "t")]);
            for level in ["-O0", "-O3"] {
                cc(
                    d,
                    "cc",
                    "count",
                    compiler,
                    &[level, "-pthread", "-o", "c", s],
                );
                let count = run(d, "c", &[("BBV_OUT", "c")]);
                let what = format!("{src}, {compiler} {level}");
                assert_eq!(count.status.code(), total.status.code(), "{what}");
                assert_eq!(count.stdout, total.stdout, "{what}");
                assert_eq!(
                    count_file(&d.join("c.count")),
                    count_file(&d.join("t.count")),
                    "{what}"
                );
            }
        }
        // A budget would go unchecked: refused, from the environment and from the program.
        let out = run(d, "c", &[("BBV_OUT", "r"), ("BBV_BUDGET", "1000")]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("BBV_BUDGET=1000") && err.contains("--mode count"),
            "{err}"
        );
        assert!(!d.join("r.count").exists());
        let budget = guest("budget.c");
        cc(
            d,
            "cc",
            "count",
            compiler,
            &["-O2", "-o", "b", budget.to_str().unwrap()],
        );
        let out = run(d, "b", &[]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("bbv_set_budget(20000)"), "{err}");
    }
}
