//! `bbv bench trace`: what `bbv trace` costs against bare QEMU and `bbv replay`, measured side
//! by side in interleaved rounds on gzip -9 of generated text:
//!
//! * per traced instruction: a run with regions and warmups of 2M instructions traced with
//!   `--raw` (records written uncompressed into files), its time over the replay's divided by
//!   the records traced, against bare QEMU's time per instruction (target: at most 30x);
//!   beside it the file system's own cost for as many bytes (written in 1 MB pieces into the
//!   same folder), which no tracer writing these files avoids, and bbv's cost without it; and
//!   the same with xz -0 (the default), whose rate is printed beside it;
//! * fast-forward: a run with three regions of 20,000 instructions and no warmup (some 60,000
//!   records), traced against replayed (target: at most 1.2x).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::measure::{fastest, in_temp_root, make_input, time, tool};

/// Interval and warmup of the run whose recording dominates its trace.
const LONG: u64 = 2_000_000;
/// Interval of the run whose fast-forward dominates (at most 3 regions, no warmup).
const SHORT: u64 = 20_000;
/// The short run's tail.
const SHORT_TAIL: &str = "1000";
/// Every record written (the figures are per record traced; condensing is measured by
/// `bbv bench warmup`), and warmups as short as the runs make them.
const FULL: &str = "--full-warmup";
const SHORT_WARMUPS: &str = "--short-warmups";

/// What one traced run directory holds.
struct Traced {
    instructions: u64,
    records: u64,
    regions: usize,
}

/// Runs the benchmark with inputs of `mb` megabytes, `runs` rounds, in `dir`, under `qemu`
/// (None: qemu-x86_64 from PATH).
pub fn run(mb: f64, runs: usize, dir: &Path, qemu: Option<&Path>) -> Result<()> {
    if runs == 0 {
        bail!("--runs 0: at least one round");
    }
    in_temp_root(dir, "trace", |root| {
        let text = root.join("input.txt");
        make_input(&text, (mb * 1e6) as usize)?;
        let guest = [
            tool("gzip")?.to_string_lossy().into_owned(),
            "-9".into(),
            "-c".into(),
            text.to_string_lossy().into_owned(),
        ];
        let exe = std::env::current_exe()?.to_string_lossy().into_owned();
        let qemu = match qemu {
            Some(q) => q.to_string_lossy().into_owned(),
            None => tool("qemu-x86_64")?.to_string_lossy().into_owned(),
        };
        let bbv = |args: &[&str]| -> Vec<String> {
            let mut v = vec![exe.clone()];
            v.extend(args.iter().map(|s| s.to_string()));
            v.extend(["--qemu".to_string(), qemu.clone(), "--".into()]);
            v.extend(guest.iter().cloned());
            v
        };
        let t = |argv: &[String]| time(argv, &[], root);
        // Long windows: the recording dominates; short ones: the fast-forward does.
        let long = root.join("long");
        let short = root.join("short");
        let (l, s) = (long.to_string_lossy(), short.to_string_lossy());
        let (li, si) = (LONG.to_string(), SHORT.to_string());
        t(&bbv(&["run", "-o", &l, "--interval", &li, "--warmup", &li]))?;
        t(&bbv(&["run", "-o", &s, "--interval", &si, "--max-k", "3"]))?;
        let bare_argv: Vec<String> = std::iter::once(qemu.clone())
            .chain(guest.iter().cloned())
            .collect();
        let (mut bare, mut replay_l, mut raw, mut sink, mut xz, mut replay_s, mut ff) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            bare.push(t(&bare_argv)?);
            replay_l.push(t(&bbv(&["replay", &l]))?);
            clear(&long)?;
            raw.push(t(&bbv(&["trace", &l, "--raw", FULL, SHORT_WARMUPS]))?);
            let bytes = read(&long)?.records * RECORD;
            clear(&long)?;
            sink.push(write_bytes(&root.join("sink"), bytes)?);
            xz.push(t(&bbv(&["trace", &l, FULL, SHORT_WARMUPS]))?);
            clear(&long)?;
            replay_s.push(t(&bbv(&["replay", &s]))?);
            clear(&short)?;
            ff.push(t(&bbv(&[
                "trace",
                &s,
                "--raw",
                "--tail",
                SHORT_TAIL,
                FULL,
                SHORT_WARMUPS,
            ]))?);
        }
        println!("QEMU: {qemu}");
        print_table(
            mb,
            [&bare, &replay_l, &raw, &sink, &xz, &replay_s, &ff].map(|v| fastest(v)),
            &read(&long)?,
            &read(&short)?,
        );
        Ok(())
    })
}

/// Bytes of a ChampSim record.
const RECORD: u64 = 64;

/// Seconds to write `bytes` zeros into a new file at `path` in 1 MB pieces (then removed): what
/// the file system alone costs for a trace of that size.
pub(crate) fn write_bytes(path: &Path, bytes: u64) -> Result<f64> {
    use std::io::Write;
    let piece = vec![0u8; 1 << 20];
    let start = std::time::Instant::now();
    let mut f = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(piece.len() as u64) as usize;
        f.write_all(&piece[..n])
            .with_context(|| format!("{}", path.display()))?;
        left -= n as u64;
    }
    drop(f);
    let secs = start.elapsed().as_secs_f64();
    std::fs::remove_file(path).with_context(|| format!("{}", path.display()))?;
    Ok(secs)
}

/// Removes a run directory's traces, if any, so that the disk holds one set at a time.
fn clear(run: &Path) -> Result<()> {
    let t = run.join("traces");
    if t.exists() {
        std::fs::remove_dir_all(&t).with_context(|| format!("cannot remove {}", t.display()))?;
    }
    Ok(())
}

fn read(run: &Path) -> Result<Traced> {
    let json = |name: &str| -> Result<serde_json::Value> {
        let p = run.join(name);
        let text = std::fs::read_to_string(&p).with_context(|| format!("{}", p.display()))?;
        Ok(serde_json::from_str(&text)?)
    };
    let trace = json(bbv_rundir::files::TRACE)?;
    let regions = trace["regions"]
        .as_array()
        .context("trace.json: no regions")?;
    let records = regions
        .iter()
        .map(|r| {
            [
                "warmup_instructions",
                "region_instructions",
                "tail_instructions",
            ]
            .iter()
            .map(|k| r[*k].as_u64().unwrap_or(0))
            .sum::<u64>()
        })
        .sum();
    Ok(Traced {
        instructions: trace["run_instructions"].as_u64().unwrap_or(0),
        records,
        regions: regions.len(),
    })
}

/// `t`: bare QEMU, replay, trace --raw, the file system's write of as many bytes and xz -0 of
/// the long windows, replay and trace of the short ones, the fastest of each.
fn print_table(mb: f64, t: [f64; 7], long: &Traced, short: &Traced) {
    let [bare, replay_l, raw, sink, xz, replay_s, ff] = t;
    let per_bare = bare / long.instructions.max(1) as f64 * 1e9;
    let per_record = |secs: f64| secs.max(0.0) / long.records.max(1) as f64 * 1e9;
    let (per_raw, per_sink, per_xz) = (
        per_record(raw - replay_l),
        per_record(sink),
        per_record(xz - replay_l),
    );
    let per_own = (per_raw - per_sink).max(0.0);
    let mb_raw = (long.records * RECORD) as f64 / 1e6;
    println!(
        "gzip -9 on {mb} MB of text: {} instructions, bare QEMU {bare:.2} s ({per_bare:.2} ns per instruction)",
        long.instructions
    );
    println!("setting | regions | records traced | bbv replay | bbv trace | per traced instruction | against bare QEMU");
    println!(
        "interval and warmup {LONG}, --raw into files | {} | {} ({mb_raw:.0} MB) | {replay_l:.2} s | {raw:.2} s | {per_raw:.1} ns | {:.1}x (target: at most 30x)",
        long.regions,
        long.records,
        per_raw / per_bare
    );
    println!(
        "  the file system writing as many bytes | | | | {sink:.2} s | {per_sink:.1} ns | {:.1}x",
        per_sink / per_bare
    );
    println!(
        "  bbv trace's own cost (the above less the file system's) | | | | | {per_own:.1} ns | {:.1}x",
        per_own / per_bare
    );
    println!(
        "interval and warmup {LONG}, xz -0 | {} | {} | {replay_l:.2} s | {xz:.2} s | {per_xz:.1} ns | {:.1}x ({:.0} MB/s of records, {} threads)",
        long.regions,
        long.records,
        per_xz / per_bare,
        mb_raw / (xz - replay_l).max(1e-9),
        long.regions
    );
    println!(
        "interval {SHORT}, no warmup, --raw (fast-forward) | {} | {} | {replay_s:.2} s | {ff:.2} s | | trace / replay {:.2}x, {:.2}x without the recording (target: at most 1.2x)",
        short.regions,
        short.records,
        ff / replay_s,
        (ff - short.records as f64 * per_raw / 1e9) / replay_s
    );
}
