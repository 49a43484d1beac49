//! `simulation.json` of `bbv gpu simulate` and its text report: the picks' cycles, the
//! estimate of the whole run (sum over picks of weight x cycles) and, with a full run, the
//! error and the speedups.

use bbv_gpusim::{Config, Launch, Simulated};
use bbv_report::{GpuFull, GpuPick, GpuSimulation};
use bbv_rundir::gpu_simulation::{GpuFullSim, GpuPickSim, GpuSimulationFile};

/// How the picks were simulated.
pub(crate) struct Setup<'a> {
    pub config: &'a Config,
    pub warmup_launches: usize,
    pub jobs: usize,
    pub full_list: Option<&'a std::path::Path>,
}

/// The document and its typed view (the page's and the text report's): picks as (launch,
/// kernel, weight) beside their simulations, every figure computed once here.
pub(crate) fn document(
    setup: &Setup,
    picks: &[(usize, String, f64)],
    results: &[(Launch, Simulated)],
    full: Option<Simulated>,
) -> (GpuSimulationFile, GpuSimulation) {
    let mut launches = Vec::new();
    let mut view_picks = Vec::new();
    let (mut est_cycles, mut est_insts) = (0.0, 0.0);
    let (mut sim_launches, mut sim_insts, mut sim_seconds) = (0usize, 0u64, 0.0);
    for ((launch, kernel, weight), (l, s)) in picks.iter().zip(results) {
        est_cycles += weight * l.cycles as f64;
        est_insts += weight * l.instructions as f64;
        sim_launches += s.launches.len();
        sim_insts += s.total_instructions;
        sim_seconds += s.seconds;
        launches.push(GpuPickSim {
            launch: *launch,
            kernel: kernel.clone(),
            weight: *weight,
            cycles: l.cycles,
            instructions: l.instructions,
            warmup_launches: s.launches.len() - 1,
            seconds: s.seconds,
        });
        view_picks.push(GpuPick {
            launch: *launch,
            kernel: kernel.clone(),
            weight: *weight,
            cycles: l.cycles,
            instructions: l.instructions,
        });
    }
    let est_ipc = est_insts / est_cycles.max(1.0);
    let pct = |e: f64, t: f64| 100.0 * (e - t) / t.max(f64::MIN_POSITIVE);
    let full_file = full.map(|f| {
        let ipc = f.total_instructions as f64 / (f.total_cycles as f64).max(1.0);
        GpuFullSim {
            full_list: setup.full_list.map(|p| p.display().to_string()),
            full_launches: f.launches.len(),
            full_cycles: f.total_cycles,
            full_instructions: f.total_instructions,
            full_ipc: ipc,
            full_seconds: f.seconds,
            error_pct: pct(est_cycles, f.total_cycles as f64),
            ipc_error_pct: pct(est_ipc, ipc),
            speedup_launches: f.launches.len() as f64 / sim_launches.max(1) as f64,
            speedup_instructions: f.total_instructions as f64 / sim_insts.max(1) as f64,
            speedup_wall: f.seconds / sim_seconds.max(1e-9),
        }
    });
    let view = GpuSimulation {
        config: setup.config.name.clone(),
        sm: setup.config.sm,
        warmup_launches: setup.warmup_launches,
        picks: view_picks,
        estimate_cycles: est_cycles,
        estimate_ipc: est_ipc,
        full: full_file.as_ref().map(|f| GpuFull {
            cycles: f.full_cycles as f64,
            ipc: f.full_ipc,
            error_pct: f.error_pct,
            ipc_error_pct: f.ipc_error_pct,
            speedup_launches: f.speedup_launches,
            speedup_instructions: f.speedup_instructions,
            speedup_wall: f.speedup_wall,
        }),
    };
    let doc = GpuSimulationFile {
        simulator: "accel-sim".into(),
        config: setup.config.name.clone(),
        sm: setup.config.sm,
        warmup_launches: setup.warmup_launches,
        jobs: setup.jobs,
        launches,
        estimate_cycles: est_cycles,
        estimate_instructions: est_insts,
        estimate_ipc: est_ipc,
        simulated_launches: sim_launches,
        simulated_instructions: sim_insts,
        simulated_seconds: sim_seconds,
        full: full_file,
    };
    (doc, view)
}

/// What `bbv gpu simulate` prints.
pub(crate) fn report(s: &GpuSimulation) -> String {
    let mut r = format!(
        "Accel-Sim, configuration {} (sm_{}), {} warming launch(es) before each pick\n",
        s.config, s.sm, s.warmup_launches
    );
    r.push_str("launch | kernel | weight | cycles | instructions\n");
    for p in &s.picks {
        r.push_str(&format!(
            "{} | {} | {:?} | {} | {}\n",
            p.launch, p.kernel, p.weight, p.cycles, p.instructions
        ));
    }
    r.push_str(&format!(
        "estimated cycles {:.0} (sum of weight x cycles), IPC {:.4}\n",
        s.estimate_cycles, s.estimate_ipc
    ));
    if let Some(f) = &s.full {
        r.push_str(&format!(
            "full run: cycles {:.0}, IPC {:.4}; error {:+.2}% in cycles, {:+.2}% in IPC; speedup {:.1}x in launches, {:.1}x in instructions, {:.1}x in simulation time\n",
            f.cycles,
            f.ipc,
            f.error_pct,
            f.ipc_error_pct,
            f.speedup_launches,
            f.speedup_instructions,
            f.speedup_wall
        ));
    }
    r
}
