//! `simulation.json` of `bbv gpu simulate` and its text report: the picks' cycles, the
//! estimate of the whole run (sum over picks of weight x cycles) and, with a full run, the
//! error and the speedups.

use bbv_gpusim::{Config, Launch, Simulated};
use serde_json::json;

/// How the picks were simulated.
pub(crate) struct Setup<'a> {
    pub config: &'a Config,
    pub warmup_launches: usize,
    pub jobs: usize,
    pub full_list: Option<&'a std::path::Path>,
}

/// The document: picks as (launch, kernel, weight) beside their simulations.
pub(crate) fn document(
    setup: &Setup,
    picks: &[(usize, String, f64)],
    results: &[(Launch, Simulated)],
    full: Option<Simulated>,
) -> serde_json::Value {
    let mut launches = Vec::new();
    let (mut est_cycles, mut est_insts) = (0.0, 0.0);
    let (mut sim_launches, mut sim_insts, mut sim_seconds) = (0usize, 0u64, 0.0);
    for ((launch, kernel, weight), (l, s)) in picks.iter().zip(results) {
        est_cycles += weight * l.cycles as f64;
        est_insts += weight * l.instructions as f64;
        sim_launches += s.launches.len();
        sim_insts += s.total_instructions;
        sim_seconds += s.seconds;
        launches.push(json!({
            "launch": launch,
            "kernel": kernel,
            "weight": weight,
            "cycles": l.cycles,
            "instructions": l.instructions,
            "warmup_launches": s.launches.len() - 1,
            "seconds": s.seconds,
        }));
    }
    let mut doc = json!({
        "simulator": "accel-sim",
        "config": setup.config.name,
        "sm": setup.config.sm,
        "warmup_launches": setup.warmup_launches,
        "jobs": setup.jobs,
        "launches": launches,
        "estimate_cycles": est_cycles,
        "estimate_instructions": est_insts,
        "estimate_ipc": est_insts / est_cycles.max(1.0),
        "simulated_launches": sim_launches,
        "simulated_instructions": sim_insts,
        "simulated_seconds": sim_seconds,
    });
    if let Some(f) = full {
        let full_ipc = f.total_instructions as f64 / (f.total_cycles as f64).max(1.0);
        let est_ipc = est_insts / est_cycles.max(1.0);
        let pct = |e: f64, t: f64| 100.0 * (e - t) / t.max(f64::MIN_POSITIVE);
        let extra = json!({
            "full_list": setup.full_list.map(|p| p.display().to_string()),
            "full_launches": f.launches.len(),
            "full_cycles": f.total_cycles,
            "full_instructions": f.total_instructions,
            "full_ipc": full_ipc,
            "full_seconds": f.seconds,
            "error_pct": pct(est_cycles, f.total_cycles as f64),
            "ipc_error_pct": pct(est_ipc, full_ipc),
            "speedup_launches": f.launches.len() as f64 / sim_launches.max(1) as f64,
            "speedup_instructions": f.total_instructions as f64 / sim_insts.max(1) as f64,
            "speedup_wall": f.seconds / sim_seconds.max(1e-9),
        });
        if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
    }
    doc
}

/// What `bbv gpu simulate` prints.
pub(crate) fn report(doc: &serde_json::Value) -> String {
    let mut r = format!(
        "Accel-Sim, configuration {} (sm_{}), {} warming launch(es) before each pick\n",
        doc["config"].as_str().unwrap_or(""),
        doc["sm"],
        doc["warmup_launches"]
    );
    r.push_str("launch | kernel | weight | cycles | instructions\n");
    for l in doc["launches"].as_array().into_iter().flatten() {
        r.push_str(&format!(
            "{} | {} | {} | {} | {}\n",
            l["launch"],
            l["kernel"].as_str().unwrap_or(""),
            l["weight"],
            l["cycles"],
            l["instructions"]
        ));
    }
    let f = |k: &str| doc[k].as_f64().unwrap_or(f64::NAN);
    r.push_str(&format!(
        "estimated cycles {:.0} (sum of weight x cycles), IPC {:.4}\n",
        f("estimate_cycles"),
        f("estimate_ipc")
    ));
    if doc.get("full_cycles").is_some() {
        r.push_str(&format!(
            "full run: cycles {:.0}, IPC {:.4}; error {:+.2}% in cycles, {:+.2}% in IPC; speedup {:.1}x in launches, {:.1}x in instructions, {:.1}x in simulation time\n",
            f("full_cycles"),
            f("full_ipc"),
            f("error_pct"),
            f("ipc_error_pct"),
            f("speedup_launches"),
            f("speedup_instructions"),
            f("speedup_wall")
        ));
    }
    r
}

/// The page's view of the document.
pub(crate) fn for_page(doc: &serde_json::Value) -> bbv_report::GpuSimulation {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let picks = doc["launches"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| bbv_report::GpuPick {
            launch: u(l, "launch") as usize,
            kernel: l["kernel"].as_str().unwrap_or("").to_string(),
            weight: f(l, "weight"),
            cycles: u(l, "cycles"),
            instructions: u(l, "instructions"),
        })
        .collect();
    let full = doc.get("full_cycles").map(|_| bbv_report::GpuFull {
        cycles: f(doc, "full_cycles"),
        ipc: f(doc, "full_ipc"),
        error_pct: f(doc, "error_pct"),
        ipc_error_pct: f(doc, "ipc_error_pct"),
        speedup_launches: f(doc, "speedup_launches"),
        speedup_wall: f(doc, "speedup_wall"),
    });
    bbv_report::GpuSimulation {
        config: doc["config"].as_str().unwrap_or("").to_string(),
        sm: u(doc, "sm") as u32,
        warmup_launches: u(doc, "warmup_launches") as usize,
        picks,
        estimate_cycles: f(doc, "estimate_cycles"),
        estimate_ipc: f(doc, "estimate_ipc"),
        full,
    }
}
