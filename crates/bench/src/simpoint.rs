//! `bbv bench simpoint` and `bbv bench scale`: wall and CPU time, peak memory and reading
//! speed, printed beside the anchor figures measured for SimPoint 3.2 on this machine kind.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::measure::{fastest, measure_bbv, Measure};

/// Runs `bbv simpoint ARGS` as a child process and measures it with wait4's resource usage.
fn measure(args: &[String]) -> Result<Measure> {
    let mut all = vec!["simpoint".to_string()];
    all.extend(args.iter().cloned());
    measure_bbv(&all)
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

/// `bbv bench scale`: generates a phased BBV of `intervals` vectors over `blocks` blocks in
/// `dir` and clusters it.
pub fn scale(intervals: usize, blocks: u32, max_k: usize, dir: &Path) -> Result<()> {
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

/// `bbv bench simpoint`: the recorded SimPoint 3.2 cases of `data`, fastest of `runs`.
pub fn simpoint(data: &Path, runs: usize) -> Result<()> {
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
    println!(
        "bbv simpoint vs SimPoint 3.2 (anchors: {}/simpoint-bench/README.md; fastest of {runs})",
        data.display()
    );
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
