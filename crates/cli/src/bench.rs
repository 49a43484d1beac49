//! `bbv bench simpoint`: wall and CPU time, peak memory and reading speed, printed beside the
//! anchor figures measured for SimPoint 3.2 on this machine kind.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

/// Benchmarks on real runs recorded with many intervals.
#[derive(clap::Args)]
pub struct Recorded {
    /// Intervals each recorded run must reach.
    #[arg(long, default_value_t = 10_000)]
    intervals: u64,
    /// Measurements per program (the median is printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where to record the runs (a temporary folder is made and removed there).
    #[arg(long, default_value = "/tmp")]
    dir: PathBuf,
}

/// What to benchmark.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Clustering speed against SimPoint 3.2 (needs ../shared/data or --data).
    Simpoint {
        /// Folder holding simpoint-bench/ and simpoint-golden/.
        #[arg(long, default_value = "../shared/data")]
        data: PathBuf,
        /// Repetitions per case (the fastest is printed: other load on the machine only ever adds).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// GPU trace parsing speed and memory: generate a large Accel-Sim trace and count it.
    Gpu {
        /// Size of the generated kernel trace, in MB.
        #[arg(long, default_value_t = 1000)]
        mb: u64,
        /// Kernel files (the size is split between them; they are parsed in parallel).
        #[arg(long, default_value_t = 2)]
        kernels: u64,
        /// Where to write the generated trace (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// Runs per shape (the fastest is printed: this machine's speed drifts).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// `bbv cc` overhead on Lua, SQLite and bzip2 (C sources from crates cargo fetches) vs
    /// native clang-14 -O2 and -fprofile-generate.
    Cc {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The clang to build with (clang-14, clang-15, clang-16).
        #[arg(long, default_value = "clang-14")]
        compiler: String,
        /// Where to build (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// CPU collection: native, bare QEMU, bbv collect (default, --exact, with metrics, and the
    /// metrics' callbacks alone), valgrind's exp-bbv and bbv replay on xz -9, bzip2 -9, gzip -9
    /// and a python3 loop; median slowdowns and ratios.
    Collect {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Multiplies the input sizes (1 = inputs of about 1.5-4 MB).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Where to write the generated inputs (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// The QEMU measured, bare and under bbv (default: qemu-x86_64 from PATH), e.g. the
        /// QEMU 10.0 scripts/build-qemu builds.
        #[arg(long, value_name = "PATH")]
        qemu: Option<PathBuf>,
    },
    /// Multi-threaded regions: `bbv run --regions looppoint` against `bbv collect` on an
    /// OpenMP program (2 and 4 threads), xz -T2 and pigz -p 2 (target: at most 1.3x).
    Threads {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the inputs and outputs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// `bbv suite run`: six equal jobs with --jobs 1 and 2 (target: at most 60%), and a re-run
    /// where every job is done (target: well under 1% of the first run).
    Suite {
        /// Runs per setting (the median is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the inputs and outputs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// The HTML report of real `bbv run --validate` runs of at least --intervals intervals:
    /// `bbv report DIR`'s time, the page's size and chromium's time to its load event.
    Report(Recorded),
    /// `bbv regions DIR` on real runs recorded with an interval that gives at least --intervals
    /// intervals (gzip -9, xz -6 and a python3 script): median time, peak memory, reading speed.
    Regions(Recorded),
    /// Scale: generate a large BBV (phased, sparse) and cluster it, printing time and peak memory.
    Scale {
        /// Intervals (vectors).
        #[arg(long, default_value_t = 1_000_000)]
        intervals: usize,
        /// Distinct blocks (largest block id).
        #[arg(long, default_value_t = 100_000)]
        blocks: u32,
        /// k search limit.
        #[arg(long = "max-k", default_value_t = 30)]
        max_k: usize,
        /// Where to write the generated file (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
}

pub(crate) struct Measure {
    pub wall: f64,
    pub cpu: f64,
    pub max_rss_mb: f64,
}

/// Runs `bbv simpoint ARGS` as a child process and measures it with wait4's resource usage.
fn measure(args: &[String]) -> Result<Measure> {
    let mut all = vec!["simpoint".to_string()];
    all.extend(args.iter().cloned());
    measure_bbv(&all)
}

/// Runs `bbv ARGS` as a child process and measures it with wait4's resource usage.
pub(crate) fn measure_bbv(args: &[String]) -> Result<Measure> {
    measure_bbv_with(args, Stdio::inherit())
}

/// As [`measure_bbv`], with the child's stderr going to `stderr` (commands that print their
/// summary there).
pub(crate) fn measure_bbv_with(args: &[String], stderr: Stdio) -> Result<Measure> {
    let exe = std::env::current_exe().context("cannot find the bbv binary")?;
    let start = Instant::now();
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("cannot start bbv")?;
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 reaps exactly the child we spawned.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = start.elapsed().as_secs_f64();
    if pid < 0 {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("bbv {} failed (status {status})", args.join(" "));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Measure {
        wall,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        max_rss_mb: usage.ru_maxrss as f64 / 1024.0,
    })
}

fn fastest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn case(name: &str, args: &[String], runs: usize, anchor: Option<(f64, f64)>) -> Result<()> {
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    let mut rss: f64 = 0.0;
    for _ in 0..runs.max(1) {
        let m = measure(args)?;
        walls.push(m.wall);
        cpus.push(m.cpu);
        rss = rss.max(m.max_rss_mb);
    }
    let (wall, cpu) = (fastest(&walls), fastest(&cpus));
    match anchor {
        Some((a_cpu, a_wall)) => println!(
            "{name:<34} wall {wall:>7.2} s  cpu {cpu:>7.2} s  rss {rss:>6.1} MB | SimPoint 3.2 wall {a_wall:>6.1} s cpu {a_cpu:>6.1} s | wall {:>5.1}x  cpu {:>5.1}x",
            a_wall / wall,
            a_cpu / cpu
        ),
        None => println!(
            "{name:<34} wall {wall:>7.2} s  cpu {cpu:>7.2} s  rss {rss:>6.1} MB | (no SimPoint anchor recorded)"
        ),
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// Reading speed on uncompressed text: parse + normalise + project, in this process.
fn reading(bb_gz: &Path) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("bbv-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let plain = dir.join("bench.bb");
    {
        let mut input = bbv_profile::open_input(bb_gz)?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&plain)?);
        loop {
            let buf = input.reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            out.write_all(buf)?;
            let n = buf.len();
            input.reader.consume(n);
        }
        out.flush()?;
    }
    let bytes = std::fs::metadata(&plain)?.len() as f64;
    let projection = bbv_simpoint::Projection::Random {
        dim: bbv_simpoint::DEFAULT_DIM,
        seed: i64::from(bbv_simpoint::DEFAULT_SEED_PROJ),
    };
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        let loaded = bbv_simpoint::load_file(&plain, &projection, |_| {})?;
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(loaded);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{:<34} {:.1} MB in {best:.3} s: {:.0} MB/s on one core (target >= 300 MB/s)",
        "reading uncompressed BBV text",
        bytes / 1e6,
        bytes / 1e6 / best
    );
    Ok(())
}

/// Writes a phased BBV: `phases` groups of hot blocks, intervals in runs of one phase, counts
/// with noise; block `blocks` appears so that the dimension is exactly `blocks`.
fn generate(path: &Path, intervals: usize, blocks: u32) -> Result<u64> {
    let mut rng = bbv_simpoint::Random::new(12345);
    let mut next = |m: u32| (rng.rand_int() % i64::from(m)) as u32;
    const PHASES: usize = 40;
    let phases: Vec<Vec<(u32, u64)>> = (0..PHASES)
        .map(|p| {
            let mut ids: Vec<u32> = (0..60).map(|_| 1 + next(blocks)).collect();
            if p == 0 {
                ids.push(blocks);
            }
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .map(|id| (id, 1 + u64::from(next(200_000))))
                .collect()
        })
        .collect();
    let file = std::fs::File::create(path)?;
    let mut w = bbv_profile::BbvWriter::new(std::io::BufWriter::new(file));
    let mut i = 0;
    let mut line = Vec::new();
    while i < intervals {
        let phase = next(PHASES as u32) as usize;
        let run = 100 + next(4900) as usize;
        for _ in 0..run.min(intervals - i) {
            line.clear();
            for &(id, base) in &phases[phase] {
                let noise = u64::from(next(1000));
                line.push((id, base * (1000 + noise) / 1000));
            }
            w.write_vector(&line)?;
            i += 1;
        }
    }
    w.finish()?.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

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

/// Runs a benchmark.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Cc {
            runs,
            dir,
            compiler,
        } => crate::bench_cc::run(runs, &dir, &compiler),
        BenchCommand::Collect {
            runs,
            scale,
            dir,
            qemu,
        } => crate::bench_collect::run(runs, &dir, scale, qemu.as_deref()),
        BenchCommand::Threads { runs, dir } => crate::bench_threads::run(runs, &dir),
        BenchCommand::Suite { runs, dir } => crate::bench_suite::run(runs, &dir),
        BenchCommand::Report(r) => crate::bench_report::run(r.intervals, r.runs, &r.dir),
        BenchCommand::Regions(r) => crate::bench_regions::run(r.intervals, r.runs, &r.dir),
        BenchCommand::Gpu {
            mb,
            kernels,
            dir,
            runs,
        } => {
            for shape in [TraceShape::Mixed, TraceShape::Short] {
                bench_gpu(mb, kernels, &dir, shape, runs)?;
            }
            Ok(())
        }
        BenchCommand::Scale {
            intervals,
            blocks,
            max_k,
            dir,
        } => {
            let path = dir.join(format!("bbv-scale-{}.bb", std::process::id()));
            let start = Instant::now();
            let bytes = generate(&path, intervals, blocks)?;
            println!(
                "generated {} ({intervals} intervals, {blocks} blocks, {:.0} MB) in {:.1} s",
                path.display(),
                bytes as f64 / 1e6,
                start.elapsed().as_secs_f64()
            );
            let args = vec![
                path.display().to_string(),
                "--max-k".to_string(),
                max_k.to_string(),
            ];
            let result = measure(&args);
            let _ = std::fs::remove_file(&path);
            let m = result?;
            println!(
                "bbv simpoint --max-k {max_k}: wall {:.1} s, cpu {:.1} s, peak RSS {:.0} MB",
                m.wall, m.cpu, m.max_rss_mb
            );
            Ok(())
        }
        BenchCommand::Simpoint { data, runs } => {
            let bench = data.join("simpoint-bench/bzip2_9_i100k.bb.gz");
            if !bench.exists() {
                bail!("{} not found (give --data DIR)", bench.display());
            }
            let s = |p: &Path| p.display().to_string();
            let args = |file: &Path, rest: &[&str]| -> Vec<String> {
                let mut v = vec!["-loadFVFile".to_string(), s(file)];
                v.extend(rest.iter().map(|x| x.to_string()));
                v
            };
            println!("bbv simpoint vs SimPoint 3.2 (anchors: {}/simpoint-bench/README.md; fastest of {runs})", data.display());
            case(
                "bzip2_9_i100k -maxK 30",
                &args(&bench, &["-maxK", "30"]),
                runs,
                Some((31.3, 31.3)),
            )?;
            case(
                "bzip2_9_i100k -k 10",
                &args(&bench, &["-k", "10"]),
                runs,
                Some((2.93, 2.93)),
            )?;
            case(
                "bzip2_9_i100k -k 1 -iters 1",
                &args(&bench, &["-k", "1", "-numInitSeeds", "1", "-iters", "1"]),
                runs,
                Some((1.70, 1.70)),
            )?;
            for name in ["bzip2_9", "gzip_9"] {
                let file = data.join(format!("simpoint-golden/{name}/{name}.bb.gz"));
                case(
                    &format!("{name} -maxK 30"),
                    &args(&file, &["-maxK", "30"]),
                    runs,
                    None,
                )?;
            }
            // Last: it loads the file in this process, and a child's peak RSS starts from the
            // parent's, so running it first would inflate the figures above.
            reading(&bench)?;
            println!("(SimPoint's wall anchors are its CPU seconds: single-threaded, on an idle machine they match.)");
            Ok(())
        }
    }
}
