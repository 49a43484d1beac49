//! `bbv bench checkpoint`: what `bbv checkpoint` costs against `bbv replay`, side by side in
//! interleaved rounds on gzip -9 of generated text (regions of 10M instructions, 8M warmups),
//! with the file system's own cost of writing as many bytes as the checkpoints hold (written
//! in 1 MB pieces into the same folder) beside it. Target: at most 1.3x the replay plus that.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::measure::{fastest, in_temp_root, make_input, time, tool};
use crate::trace::write_bytes;

/// The QEMU scripts/build-qemu builds, where it builds it.
fn default_qemu() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let q = Path::new(&home).join(".cache/bbvkit/qemu-10/bin/qemu-x86_64");
    if !q.exists() {
        bail!(
            "{}: missing; run scripts/build-qemu or give --qemu (9.1 or later)",
            q.display()
        );
    }
    Ok(q)
}

/// Bytes of the files in a folder.
fn folder_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let e = e?;
        if e.file_type()?.is_file() {
            n += e.metadata()?.len();
        }
    }
    Ok(n)
}

/// Runs the benchmark with `mb` megabytes of text, `runs` rounds, in `dir`, under `qemu`.
pub fn run(mb: f64, runs: usize, dir: &Path, qemu: Option<&Path>) -> Result<()> {
    if runs == 0 {
        bail!("--runs 0: at least one round");
    }
    let qemu = match qemu {
        Some(q) => q.to_path_buf(),
        None => default_qemu()?,
    };
    in_temp_root(dir, "checkpoint", |root| {
        let text = root.join("input.txt");
        make_input(&text, (mb * 1e6) as usize)?;
        let exe = std::env::current_exe()?.to_string_lossy().into_owned();
        let q = qemu.to_string_lossy().into_owned();
        let guest = [
            tool("gzip")?.to_string_lossy().into_owned(),
            "-9".into(),
            "-c".into(),
        ];
        let bbv = |args: &[&str]| -> Vec<String> {
            let mut v = vec![exe.clone()];
            v.extend(args.iter().map(|s| s.to_string()));
            v.extend(["--qemu".to_string(), q.clone(), "--".into()]);
            v.extend(guest.iter().cloned());
            v.push(text.to_string_lossy().into_owned());
            v
        };
        let t = |argv: &[String]| time(argv, &[], root);
        let run_dir = root.join("run");
        let r = run_dir.to_string_lossy().into_owned();
        t(&bbv(&[
            "run",
            "-o",
            &r,
            "--interval",
            "10000000",
            "--warmup",
            "8000000",
        ]))?;
        let ck = run_dir.join("checkpoints");
        let (mut replay, mut checkpoint, mut sink, mut bytes) = (vec![], vec![], vec![], 0);
        for _ in 0..runs {
            replay.push(t(&bbv(&["replay", &r]))?);
            if ck.exists() {
                std::fs::remove_dir_all(&ck)?;
            }
            checkpoint.push(t(&bbv(&["checkpoint", &r]))?);
            bytes = folder_bytes(&ck)?;
            sink.push(write_bytes(&root.join("sink"), bytes)?);
        }
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(ck.join("checkpoints.json"))?)?;
        let regions = index["regions"]
            .as_array()
            .context("checkpoints.json: no regions")?;
        let memory: u64 = regions
            .iter()
            .map(|r| r["memory_bytes"].as_u64().unwrap_or(0))
            .sum();
        let [replay, checkpoint, sink] = [&replay, &checkpoint, &sink].map(|v| fastest(v));
        println!(
            "QEMU: {q}; gzip -9 on {mb} MB of text, {} regions",
            regions.len()
        );
        println!("bbv replay | bbv checkpoint | checkpoints written | the file system writing as many bytes | checkpoint less that, over the replay");
        println!(
            "{replay:.2} s | {checkpoint:.2} s ({:.2}x) | {:.0} MB ({:.0} MB of memory kept) | {sink:.2} s | {:.2}x (target: at most 1.3x)",
            checkpoint / replay,
            bytes as f64 / 1e6,
            memory as f64 / 1e6,
            (checkpoint - sink) / replay
        );
        Ok(())
    })
}
