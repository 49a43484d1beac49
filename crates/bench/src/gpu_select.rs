//! `bbv bench gpu-select`: launch selection on a large generated timed run, rule by rule: how
//! long each takes to pick, against Sieve's rule (the simplest, the anchor), with each one's
//! picks and GPU-time error, so that a slower rule shows what it buys.

use std::time::Instant;

use anyhow::Result;
use bbv_gpu::blocks::Vector;
use bbv_gpu::select::{score_picks, select, Rule, SampleOptions, TimedLaunch};

/// `launches` launches of `kernels` kernels, round robin as a training step's would be: each
/// kernel of three sizes (x1, x4, x16, a few percent apart within a size) and two paths through
/// it (a third of its launches put half their instructions in other blocks, and take 30% more
/// time per instruction there, as a memory-bound path would: what counts alone cannot see);
/// three timing runs, each launch a fixed 3 us plus 0.1 ns a warp instruction (0.13 on the
/// other path), 2% apart run to run. An illustration of what each rule sees, not evidence of
/// how real workloads behave (the recorded ones are).
fn generate(launches: usize, kernels: usize) -> (Vec<TimedLaunch>, Vec<Vector>) {
    // SimPoint's generator, seeded: the same run every time.
    let mut g = bbv_simpoint::Random::new(i64::from(bbv_simpoint::DEFAULT_SEED_PROJ));
    let mut unit = || f64::from(g.rand_float());
    let mut out = Vec::with_capacity(launches);
    let mut vectors = Vec::with_capacity(launches);
    for i in 0..launches {
        let k = i % kernels;
        let size = [1u64, 4, 16][(i / kernels) % 3];
        let base = 20_000 + 1_000 * k as u64;
        let insts = (base * size) as f64 * (1.0 + 0.04 * unit());
        let insts = insts as u64;
        let first = 8 * k as u32;
        let other_path = unit() < 1.0 / 3.0;
        let (vector, per_inst): (Vector, f64) = match other_path {
            true => (
                vec![(first, insts / 2), (first + 4, insts - insts / 2)],
                0.13,
            ),
            false => (
                vec![(first, insts / 2), (first + 1, insts - insts / 2)],
                0.1,
            ),
        };
        let ns: Vec<u64> = (0..3)
            .map(|_| ((3_000.0 + per_inst * insts as f64) * (0.99 + 0.02 * unit())) as u64)
            .collect();
        out.push(TimedLaunch {
            kernel: format!("_Z7kernel{k}Pf"),
            grid: [(size * 8) as u32, 1, 1],
            block: [256, 1, 1],
            registers: 32 + (k % 4) as u32 * 8,
            shared: 0,
            warp_insts: insts,
            ns,
        });
        vectors.push(vector);
    }
    (out, vectors)
}

/// Runs the benchmark.
pub fn run(launches: usize, kernels: usize) -> Result<()> {
    anyhow::ensure!(
        launches > 0 && kernels > 0,
        "--launches and --kernels must be at least 1"
    );
    let start = Instant::now();
    let (run, vectors) = generate(launches, kernels);
    println!(
        "bbv bench gpu-select: {launches} launches of {kernels} kernels generated in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    println!("rule | picks | seconds | launches/s | x Sieve's time | GPU-time error");
    let mut anchor = None;
    // Sieve's first: the anchor.
    for rule in [Rule::Sieve, Rule::Bbv, Rule::Stem, Rule::Pka] {
        let o = SampleOptions {
            rule,
            ..SampleOptions::default()
        };
        let start = Instant::now();
        let picks = select(&run, Some(&vectors), &o)?;
        let secs = start.elapsed().as_secs_f64();
        let score = score_picks(&run, &picks, rule)?;
        let anchor = *anchor.get_or_insert(secs);
        println!(
            "{} | {} | {secs:.3} | {:.0} | {:.2} | {:+.3}%",
            rule.name(),
            picks.len(),
            launches as f64 / secs.max(1e-9),
            secs / anchor.max(1e-9),
            100.0 * score.error
        );
    }
    Ok(())
}
