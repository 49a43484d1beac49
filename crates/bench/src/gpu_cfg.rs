//! `bbv gpu cfg`'s own cost against the disassembler's: the largest cubin of a file (a cubin,
//! fat binary or library), nvdisasm's time and peak memory on it, then bbv's parsing of that
//! SASS text into CFGs (MB/s; target at least 50 MB/s).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bbv_gpucfg::{Kind, Tools};

/// nvdisasm's stdout, wall seconds and peak resident memory (bytes) on `cubin`.
fn disassemble(nvdisasm: &Path, cubin: &Path) -> Result<(String, f64, u64)> {
    let t = Instant::now();
    let mut child = Command::new(nvdisasm)
        .arg("-c")
        .arg(cubin)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", nvdisasm.display()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().context("no stdout")?, &mut text)?;
    let m = crate::measure::reap(child, t, &format!("nvdisasm on {}", cubin.display()))?;
    Ok((text, m.wall, (m.max_rss_mb * 1024.0 * 1024.0) as u64))
}

/// Runs the benchmark on `file` with `runs` timed parses.
pub fn run(file: &Path, runs: usize) -> Result<()> {
    let mut tools = Tools::default();
    let kind = bbv_gpucfg::file_kind(file)?;
    let (_dir, cubins): (Option<tempfile::TempDir>, Vec<PathBuf>) = match kind {
        Kind::Cubin => (None, vec![file.to_path_buf()]),
        Kind::FatBinary | Kind::HostElf => {
            let (dir, names) = bbv_gpucfg::nvidia::extract(file, kind, &mut tools)?;
            let paths = names.iter().map(|n| dir.path().join(n)).collect();
            (Some(dir), paths)
        }
        Kind::AmdGpu => bail!(
            "{}: AMDGPU code; this benchmark reads NVIDIA SASS",
            file.display()
        ),
    };
    let largest = cubins
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .context("no cubin")?;
    let nvdisasm = tools.nvdisasm()?;
    let (text, wall, rss) = disassemble(&nvdisasm, largest)?;
    let mut best = f64::INFINITY;
    let mut shape = (0, 0, 0);
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let functions = bbv_gpucfg::nvidia::from_sass(&text, largest)?;
        best = best.min(t.elapsed().as_secs_f64());
        shape = (
            functions.len(),
            functions.iter().map(|f| f.blocks.len()).sum::<usize>(),
            functions.iter().map(|f| f.instructions()).sum::<usize>(),
        );
    }
    let mb = text.len() as f64 / 1e6;
    println!(
        "bbv bench gpu-cfg: the largest of {} cubin(s) in {}",
        cubins.len(),
        file.display()
    );
    for line in &tools.used {
        println!("  {line}");
    }
    println!(
        "cubin {} ({:.1} MB): {} functions, {} blocks, {} instructions",
        largest.file_name().unwrap_or_default().to_string_lossy(),
        std::fs::metadata(largest)?.len() as f64 / 1e6,
        shape.0,
        shape.1,
        shape.2
    );
    println!(
        "nvdisasm -c: {wall:.2} s, {:.0} MB peak memory, {mb:.1} MB of SASS text ({:.1} MB/s)",
        rss as f64 / 1e6,
        mb / wall
    );
    println!(
        "bbv's parsing into CFGs: {best:.3} s, {:.0} MB/s (target >= 50 MB/s; fastest of {runs})",
        mb / best
    );
    Ok(())
}
