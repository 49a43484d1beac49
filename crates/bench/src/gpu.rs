//! `bbv bench gpu`: Accel-Sim trace parsing speed and memory on a generated trace.

use std::io::Write;
use std::path::Path;

use anyhow::Result;

use crate::measure::{fastest, measure_bbv, Measure};

/// Instruction lines of the generated traces, by shape.
#[derive(Clone, Copy)]
enum TraceShape {
    /// ALU, shared and global memory instructions (address modes 0, 1 and 2), mixed masks:
    /// 72 bytes a line on average, most of them in address lists.
    Mixed,
    /// Short ALU lines like the shipped Pascal traces' (matrixmul: 40 bytes a line on
    /// average): the per-line costs dominate.
    Short,
}

impl TraceShape {
    fn body(self) -> &'static [&'static str] {
        match self {
            TraceShape::Mixed => &[
                "0010 ffffffff 1 R1 IMAD.MOV.U32 2 R255 R2 0 ",
                "0020 ffffffff 1 R4 S2R 0 0 ",
                "0030 ffffffff 1 R6 IMAD.WIDE 2 R4 R5 0 ",
                "0040 ffffffff 1 R8 LDG.E.SYS 1 R6 4 1 0x7f5e2a600000 4 ",
                "0050 0000ffff 1 R9 LDS.U.32 1 R7 4 2 0x1000 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 ",
                "0060 ffffffff 1 R10 FFMA 3 R8 R9 R10 0 ",
                "0070 0f0f0f0f 0 STG.E.SYS 2 R6 R10 4 0 0x00007f5e2a700000 0x00007f5e2a700004 0x00007f5e2a700010 0x00007f5e2a700014 0x00007f5e2a700020 0x00007f5e2a700024 0x00007f5e2a700030 0x00007f5e2a700034 0x00007f5e2a700040 0x00007f5e2a700044 0x00007f5e2a700050 0x00007f5e2a700054 0x00007f5e2a700060 0x00007f5e2a700064 0x00007f5e2a700070 0x00007f5e2a700074 ",
                "0080 ffffffff 0 ISETP.GE.AND 2 R10 R11 0 ",
                "0090 00000000 0 BRA 0 0 ",
                "00a0 ffffffff 0 EXIT 0 0 ",
            ],
            TraceShape::Short => &[
                "0008 ffffffff 1 R1 MOV 0 0 ",
                "0010 ffffffff 1 R0 S2R 0 0 ",
                "0018 ffffffff 1 R17 SHL 1 R17 0 ",
                "0028 ffffffff 1 R0 XMAD 3 R3 R17 R0 0 ",
                "0030 ffffffff 1 R2 XMAD.MRG 3 R3 R17 R255 0 ",
                "0038 ffffffff 1 R0 XMAD.PSL.CBCC 3 R3 R2 R0 0 ",
                "0048 ffffffff 1 R2 IADD 2 R0 R6 0 ",
                "0050 ffffffff 1 R8 LDS.U.32 1 R7 4 1 0x1000 4 ",
                "0058 ffffffff 1 R9 FFMA 3 R8 R9 R10 0 ",
                "0068 ffffffff 0 ISETP.LT.AND 2 R9 R11 0 ",
                "0070 ffffffff 0 BAR.SYNC 1 R255 0 ",
                "0078 ffffffff 0 EXIT 0 0 ",
            ],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            TraceShape::Mixed => "mixed ALU/memory lines",
            TraceShape::Short => "short ALU lines",
        }
    }
}

/// Writes a tracer-v4 kernel trace of about `bytes` bytes, a loop over `shape`'s lines.
/// Returns the instruction lines.
fn generate_trace(path: &Path, id: u64, bytes: u64, shape: TraceShape) -> Result<u64> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "-kernel name = _Z6stressPfS_i\n-kernel id = {id}\n-grid dim = (100000,1,1)\n-block dim = (256,1,1)\n-shmem = 0\n-nregs = 32\n-binary version = 70\n-cuda stream id = 0\n-shmem base_addr = 0x00007f0000000000\n-local mem base_addr = 0x00007f1000000000\n-nvbit version = 1.5.5\n-accelsim tracer version = 4\n-enable lineinfo = 0\n\n#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [adrrescompress?] [mem_addresses]\n")?;
    let body = shape.body();
    let warp_lines = 200;
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut tb = 0u64;
    while written < bytes {
        let mut text = format!("#BEGIN_TB\n\nthread block = {tb},0,0\n\n");
        for warp in 0..8 {
            text.push_str(&format!("warp = {warp}\ninsts = {warp_lines}\n"));
            for i in 0..warp_lines {
                text.push_str(body[i % body.len()]);
                text.push('\n');
            }
            text.push('\n');
        }
        text.push_str("#END_TB\n\n");
        w.write_all(text.as_bytes())?;
        written += text.len() as u64;
        lines += 8 * warp_lines as u64;
        tb += 1;
    }
    w.flush()?;
    Ok(lines)
}

/// Generates `mb` MB of `shape`'s trace in `kernels` files, warms the page cache and counts
/// it `runs` times, printing the fastest speed and the largest memory.
fn bench_gpu(mb: u64, kernels: u64, dir: &Path, shape: TraceShape, runs: usize) -> Result<()> {
    let root = dir.join(format!("bbv-gpu-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    let kernels = kernels.max(1);
    let names: Vec<String> = (1..=kernels)
        .map(|k| format!("kernel-{k}.traceg"))
        .collect();
    let mut lines = 0;
    for (k, name) in (1..).zip(&names) {
        lines += generate_trace(&root.join(name), k, mb * 1_000_000 / kernels, shape)?;
    }
    std::fs::write(root.join("kernelslist.g"), names.join("\n") + "\n")?;
    let mut bytes = 0;
    // Warm the page cache, as the target is stated for a warm cache.
    // (Streamed: a child's peak RSS starts from the parent's, so the parent stays small.)
    for name in &names {
        let mut f = std::fs::File::open(root.join(name))?;
        bytes += std::io::copy(&mut f, &mut std::io::sink())?;
    }
    let args = vec![
        "gpu".to_string(),
        "count".to_string(),
        root.join("kernelslist.g").display().to_string(),
    ];
    let result: Result<Vec<Measure>> = (0..runs.max(1)).map(|_| measure_bbv(&args)).collect();
    let _ = std::fs::remove_dir_all(&root);
    let all = result?;
    let wall = fastest(&all.iter().map(|m| m.wall).collect::<Vec<_>>());
    let cpu = fastest(&all.iter().map(|m| m.cpu).collect::<Vec<_>>());
    let rss = all.iter().map(|m| m.max_rss_mb).fold(0.0, f64::max);
    println!(
        "bbv gpu count on {:.0} MB of .traceg, {} ({lines} instruction lines, {kernels} kernel files), fastest of {}: wall {wall:.2} s, cpu {cpu:.2} s, peak RSS {rss:.1} MB",
        bytes as f64 / 1e6,
        shape.describe(),
        all.len(),
    );
    println!(
        "  {:.0} MB/s per core (target >= 500), {:.0} MB/s wall",
        bytes as f64 / 1e6 / cpu,
        bytes as f64 / 1e6 / wall
    );
    Ok(())
}

/// `bbv bench gpu`: both trace shapes.
pub fn run(mb: u64, kernels: u64, dir: &Path, runs: usize) -> Result<()> {
    for shape in [TraceShape::Mixed, TraceShape::Short] {
        bench_gpu(mb, kernels, dir, shape, runs)?;
    }
    Ok(())
}
