//! `bbv bench cc`: the cost of `bbv cc` on real C code not written by us — the Lua 5.4
//! interpreter (from the `lua-src` crate), SQLite's amalgamation (`libsqlite3-sys`) and bzip2
//! (`bzip2-sys`) — each driven by a small program of ours, built natively with clang -O2 (14 unless `--compiler` says), with
//! `-fprofile-generate`, and with `bbv cc` in total, blocks and count modes; CPU-time ratios vs
//! native.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

const LUA_DRIVER: &str = r#"
#include "lua.h"
#include "lualib.h"
#include "lauxlib.h"
#include <stdio.h>
int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    for (int i = 1; i < argc; i++)
        if (luaL_dofile(L, argv[i]) != LUA_OK) {
            fprintf(stderr, "%s\n", lua_tostring(L, -1));
            return 1;
        }
    lua_close(L);
    return 0;
}
"#;

const LUA_SCRIPTS: &[(&str, &str)] = &[
    (
        "binary-trees",
        "local function make(d) if d == 0 then return {} end return {make(d-1), make(d-1)} end
         local function check(t) if t[1] then return 1 + check(t[1]) + check(t[2]) end return 1 end
         local n = 0 for i = 1, 40 do n = n + check(make(14)) end print(n)",
    ),
    (
        "n-body",
        "local x, y, vx, vy = {}, {}, {}, {}
         for i = 1, 5 do x[i], y[i], vx[i], vy[i] = i, i * 0.5, 0, 0 end
         for step = 1, 300000 do
           for i = 1, 5 do for j = i + 1, 5 do
             local dx, dy = x[i] - x[j], y[i] - y[j]
             local d2 = dx * dx + dy * dy + 0.01
             local m = 0.001 / (d2 * math.sqrt(d2))
             vx[i], vy[i] = vx[i] - dx * m, vy[i] - dy * m
             vx[j], vy[j] = vx[j] + dx * m, vy[j] + dy * m
           end end
           for i = 1, 5 do x[i], y[i] = x[i] + vx[i] * 0.01, y[i] + vy[i] * 0.01 end
         end print(x[1])",
    ),
    (
        "strings",
        "local t = {} for i = 1, 200000 do t[#t + 1] = string.format('%d:%x', i, i * 7) end
         table.sort(t) local s = table.concat(t, ',') local n = 0
         for w in s:gmatch('[^,]+') do n = n + #w end print(n)",
    ),
];

const SQLITE_DRIVER: &str = r#"
#include "sqlite3.h"
#include <stdio.h>
static int ok(int rc, sqlite3 *db) { if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) { fprintf(stderr, "%s\n", sqlite3_errmsg(db)); return 0; } return 1; }
int main(void) {
    sqlite3 *db; sqlite3_stmt *st;
    if (!ok(sqlite3_open(":memory:", &db), db)) return 1;
    sqlite3_exec(db, "create table t(id integer primary key, k integer, v text); begin", 0, 0, 0);
    sqlite3_prepare_v2(db, "insert into t(k, v) values(?, ?)", -1, &st, 0);
    char buf[32];
    for (int i = 0; i < 200000; i++) {
        snprintf(buf, sizeof buf, "value-%d", (i * 7919) % 100003);
        sqlite3_bind_int(st, 1, (i * 31) % 1000);
        sqlite3_bind_text(st, 2, buf, -1, SQLITE_TRANSIENT);
        if (!ok(sqlite3_step(st), db)) return 1;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_exec(db, "commit; create index tk on t(k)", 0, 0, 0);
    const char *q = "select k, count(*), max(v) from t where k % 3 = 1 group by k order by 2 desc, 1 limit 5";
    long long sum = 0;
    for (int r = 0; r < 20; r++) {
        sqlite3_prepare_v2(db, q, -1, &st, 0);
        while (sqlite3_step(st) == SQLITE_ROW) sum += sqlite3_column_int(st, 1);
        sqlite3_finalize(st);
    }
    printf("%lld\n", sum);
    sqlite3_close(db);
    return 0;
}
"#;

/// Source directories of the crates that ship the C code (fetched by cargo as dev-dependencies
/// of bbv-llvm-runtime).
fn crate_dirs() -> Result<Vec<(String, PathBuf)>> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .context(
            "cannot run cargo metadata (the benchmark reads C sources from crates cargo fetches)",
        )?;
    if !out.status.success() {
        bail!("cargo metadata failed");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut dirs = Vec::new();
    for p in v["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
    {
        let name = p["name"].as_str().unwrap_or("");
        if matches!(name, "lua-src" | "libsqlite3-sys" | "bzip2-sys") {
            let m = PathBuf::from(p["manifest_path"].as_str().unwrap_or(""));
            dirs.push((
                name.to_string(),
                m.parent().unwrap_or(Path::new("")).to_path_buf(),
            ));
        }
    }
    Ok(dirs)
}

fn dir_of(dirs: &[(String, PathBuf)], name: &str) -> Result<PathBuf> {
    dirs.iter()
        .find(|d| d.0 == name)
        .map(|d| d.1.clone())
        .with_context(|| format!("the {name} crate's sources were not found (cargo fetch)"))
}

/// One C program of the benchmark: its sources, flags and the argument lists it runs with.
pub(crate) struct Program {
    pub(crate) name: &'static str,
    sources: Vec<PathBuf>,
    includes: Vec<PathBuf>,
    defines: Vec<&'static str>,
    pub(crate) runs: Vec<Vec<String>>,
}

impl Program {
    /// The workload's label in tables: `lua SCRIPT` for Lua's runs, else the program's name.
    pub(crate) fn label(&self, args: &[String]) -> String {
        match args.first() {
            Some(a) if self.name == "lua" => format!(
                "lua {}",
                Path::new(a)
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
            ),
            _ => self.name.to_string(),
        }
    }
}

pub(crate) fn check(st: std::process::ExitStatus, what: &str) -> Result<()> {
    if !st.success() {
        bail!("{what} failed ({st})");
    }
    Ok(())
}

/// Builds `p` in `variant` with `compiler` at optimisation `level` (`-O2`) into
/// `dir/name-variant-level`.
pub(crate) fn build(
    p: &Program,
    variant: &str,
    compiler: &str,
    level: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let exe = dir.join(format!("{}-{variant}{level}", p.name));
    let bbv = std::env::current_exe()?;
    let mut cmd = match variant {
        "total" | "blocks" | "count" => {
            let mut c = Command::new(&bbv);
            c.args(["cc", "--mode", variant, "--", compiler]);
            c
        }
        _ => Command::new(compiler),
    };
    cmd.arg(level).arg("-w");
    if variant == "profgen" {
        cmd.arg("-fprofile-generate");
    }
    for i in &p.includes {
        cmd.arg("-I").arg(i);
    }
    for d in &p.defines {
        cmd.arg(d);
    }
    cmd.args(&p.sources)
        .arg("-o")
        .arg(&exe)
        .args(["-lm", "-lpthread", "-ldl"]);
    check(
        cmd.status().context("cannot run the compiler")?,
        &format!("building {} ({variant})", p.name),
    )?;
    Ok(exe)
}

/// CPU seconds (user + system) of one run.
fn cpu(exe: &Path, args: &[String], dir: &Path) -> Result<f64> {
    let child = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("LLVM_PROFILE_FILE", dir.join("prof.raw"))
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 reaps exactly our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{} failed (status {status})", exe.display());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The three programs with their sources and inputs, written into `d`.
pub(crate) fn programs(d: &Path) -> Result<Vec<Program>> {
    let dirs = crate_dirs()?;
    let lua = dir_of(&dirs, "lua-src")?.join("lua-5.4.9");
    let mut lua_sources: Vec<PathBuf> = std::fs::read_dir(&lua)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "c")
                && !p.ends_with("lua.c")
                && !p.ends_with("luac.c")
        })
        .collect();
    lua_sources.sort();
    std::fs::write(d.join("lua_driver.c"), LUA_DRIVER)?;
    lua_sources.push(d.join("lua_driver.c"));
    for (name, text) in LUA_SCRIPTS {
        std::fs::write(d.join(format!("{name}.lua")), text)?;
    }
    let sqlite = dir_of(&dirs, "libsqlite3-sys")?.join("sqlite3");
    std::fs::write(d.join("sqlite_driver.c"), SQLITE_DRIVER)?;
    let bz = dir_of(&dirs, "bzip2-sys")?.join("bzip2-1.0.8");
    let bz_sources = [
        "blocksort.c",
        "huffman.c",
        "crctable.c",
        "randtable.c",
        "compress.c",
        "decompress.c",
        "bzlib.c",
        "bzip2.c",
    ]
    .iter()
    .map(|f| bz.join(f))
    .collect();
    let input = d.join("input.txt");
    let mut text = String::new();
    let mut x = 7u64;
    while text.len() < 6_000_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&format!("{:x} ", (x >> 40) % 5000));
    }
    std::fs::write(&input, text)?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    Ok(vec![
        Program {
            name: "lua",
            sources: lua_sources,
            includes: vec![lua.clone()],
            // Lua seeds its string hash from the time and ASLR'd addresses, picks sort pivots
            // from the clock and indexes its API string cache by the C string's address (which
            // moves with every change of code layout, -O level included): fixed seeds and a
            // one-slot cache make its work, and so its counts, the same on every run and build.
            defines: vec![
                "-DLUA_USE_LINUX",
                "-Dluai_makeseed(L)=0",
                "-Dl_randomizePivot()=0",
                "-DSTRCACHE_N=1",
                "-DSTRCACHE_M=2",
            ],
            runs: LUA_SCRIPTS
                .iter()
                .map(|(n, _)| vec![s(&d.join(format!("{n}.lua")))])
                .collect(),
        },
        Program {
            name: "sqlite",
            sources: vec![sqlite.join("sqlite3.c"), d.join("sqlite_driver.c")],
            includes: vec![sqlite.clone()],
            defines: vec!["-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION"],
            runs: vec![vec![]],
        },
        Program {
            name: "bzip2",
            sources: bz_sources,
            includes: vec![bz.clone()],
            defines: vec![],
            runs: vec![vec!["-9".into(), "-k".into(), "-c".into(), s(&input)]],
        },
    ])
}

/// Runs the benchmark with `runs` repetitions per cell, building with `compiler` (a clang).
pub fn run(runs: usize, dir: &Path, compiler: &str) -> Result<()> {
    let root = tempfile::Builder::new()
        .prefix("bbv-bench-cc-")
        .tempdir_in(dir)?;
    let d = root.path();
    let programs = programs(d)?;
    let variants = ["native", "profgen", "total", "blocks", "count"];
    println!(
        "bbv bench cc: median CPU seconds of {runs} round(s) over the variants; ratios vs native {compiler} -O2"
    );
    println!("(targets: total mode <= 1.3x native, blocks mode <= 1.8x, geometric means;");
    println!(" --mode count is total mode without budget checks: what the checks cost)\n");
    println!(
        "{:<22} {:>9} {:>16} {:>10} {:>10} {:>10}",
        "workload", "native s", "-fprofile-gen", "bbv total", "bbv blocks", "bbv count"
    );
    let (mut tot, mut blk, mut prof, mut cnt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in &programs {
        eprintln!("building {} ({} variants)...", p.name, variants.len());
        let exes: Vec<PathBuf> = variants
            .iter()
            .map(|v| build(p, v, compiler, "-O2", d))
            .collect::<Result<_>>()?;
        for args in &p.runs {
            // Round-robin over the variants, so that the machine's speed drifting during the
            // benchmark (common on shared VMs) moves every variant alike.
            let mut times = vec![Vec::new(); exes.len()];
            for _ in 0..runs.max(1) {
                for (t, exe) in times.iter_mut().zip(&exes) {
                    t.push(cpu(exe, args, d)?);
                }
            }
            let med: Vec<f64> = times.into_iter().map(median).collect();
            let label = p.label(args);
            prof.push(med[1] / med[0]);
            tot.push(med[2] / med[0]);
            blk.push(med[3] / med[0]);
            cnt.push(med[4] / med[0]);
            println!(
                "{label:<22} {:>9.2} {:>15.2}x {:>9.2}x {:>9.2}x {:>9.2}x",
                med[0],
                med[1] / med[0],
                med[2] / med[0],
                med[3] / med[0],
                med[4] / med[0]
            );
        }
    }
    let g = |v: &[f64]| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp();
    println!(
        "\ngeometric means: -fprofile-generate {:.2}x, bbv total {:.2}x (target <= 1.3x), bbv blocks {:.2}x (target <= 1.8x), bbv count {:.2}x",
        g(&prof),
        g(&tot),
        g(&blk),
        g(&cnt)
    );
    Ok(())
}
