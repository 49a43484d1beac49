//! A GPU sample folder's `simulation.json`: what `bbv gpu simulate` measured with Accel-Sim
//! (written by bbv-gpujob, read back by the same type wherever it is read).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::RundirError;

/// One launch picked, as simulated.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuPickSim {
    /// 1-based launch number in the list.
    pub launch: usize,
    /// Its kernel.
    pub kernel: String,
    /// Its weight in the estimate.
    pub weight: f64,
    /// Its cycles (after its warming launches).
    pub cycles: u64,
    /// Its thread instructions.
    pub instructions: u64,
    /// Launches simulated before it to warm the L2.
    pub warmup_launches: usize,
    /// Accel-Sim's wall seconds, warming included.
    pub seconds: f64,
}

/// The whole list simulated at once (`--full`), and the estimate against it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuFullSim {
    /// The list simulated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_list: Option<String>,
    /// Its launches.
    pub full_launches: usize,
    /// Its cycles.
    pub full_cycles: u64,
    /// Its thread instructions.
    pub full_instructions: u64,
    /// Its IPC.
    pub full_ipc: f64,
    /// Accel-Sim's wall seconds.
    pub full_seconds: f64,
    /// 100 x (estimate - full) / full, in cycles.
    pub error_pct: f64,
    /// The same in IPC.
    pub ipc_error_pct: f64,
    /// Launches simulated in full over those of the picks (their warming ones included).
    pub speedup_launches: f64,
    /// Instructions likewise.
    pub speedup_instructions: f64,
    /// Accel-Sim's wall time likewise.
    pub speedup_wall: f64,
}

/// `simulation.json` of a GPU sample folder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuSimulationFile {
    /// `accel-sim`.
    pub simulator: String,
    /// The tested configuration's name.
    pub config: String,
    /// Its SM version.
    pub sm: u32,
    /// Launches simulated before each pick.
    pub warmup_launches: usize,
    /// Simulator processes at a time.
    pub jobs: usize,
    /// The picks, in the sample's order.
    pub launches: Vec<GpuPickSim>,
    /// Sum over picks of weight x cycles.
    pub estimate_cycles: f64,
    /// Sum over picks of weight x instructions.
    pub estimate_instructions: f64,
    /// Their ratio.
    pub estimate_ipc: f64,
    /// Launches simulated, warming ones included.
    pub simulated_launches: usize,
    /// Their instructions.
    pub simulated_instructions: u64,
    /// Accel-Sim's wall seconds over them.
    pub simulated_seconds: f64,
    /// With `--full`.
    #[serde(flatten)]
    pub full: Option<GpuFullSim>,
}

impl GpuSimulationFile {
    /// The document as written: keys in sorted order, as bbv has always written it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data serializes")
    }

    /// `dir/simulation.json`, None when there is none.
    pub fn read(dir: &Path) -> Result<Option<GpuSimulationFile>, RundirError> {
        crate::read_optional_json(dir, crate::files::SIMULATION, "bbv gpu simulate")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(full: bool) -> GpuSimulationFile {
        GpuSimulationFile {
            simulator: "accel-sim".into(),
            config: "SM90_H100".into(),
            sm: 90,
            warmup_launches: 4,
            jobs: 2,
            launches: vec![GpuPickSim {
                launch: 3,
                kernel: "k".into(),
                weight: 2.5,
                cycles: 100,
                instructions: 400,
                warmup_launches: 2,
                seconds: 0.5,
            }],
            estimate_cycles: 250.0,
            estimate_instructions: 1000.0,
            estimate_ipc: 4.0,
            simulated_launches: 3,
            simulated_instructions: 1200,
            simulated_seconds: 0.5,
            full: full.then(|| GpuFullSim {
                full_list: None,
                full_launches: 6,
                full_cycles: 240,
                full_instructions: 2000,
                full_ipc: 8.3,
                full_seconds: 1.0,
                error_pct: 4.2,
                ipc_error_pct: -4.0,
                speedup_launches: 2.0,
                speedup_instructions: 1.7,
                speedup_wall: 2.0,
            }),
        }
    }

    /// Written flat (the full run's keys beside the estimate's, `full_list` left out when none
    /// was named: no `null` in bbv's files) and read back to the same value, with and without a full run.
    #[test]
    fn round_trips_flat() {
        let t = tempfile::tempdir().unwrap();
        for full in [false, true] {
            let f = file(full);
            let v = f.to_json();
            assert_eq!(v.get("full_cycles").is_some(), full);
            assert!(v.get("full_list").is_none(), "{v}");
            assert!(v.get("full").is_none());
            std::fs::write(t.path().join("simulation.json"), format!("{v:#}")).unwrap();
            assert_eq!(GpuSimulationFile::read(t.path()).unwrap(), Some(f));
        }
        std::fs::write(t.path().join("simulation.json"), "{\"launches\": 3}").unwrap();
        let e = GpuSimulationFile::read(t.path()).unwrap_err().to_string();
        assert!(e.contains("bbv gpu simulate"), "{e}");
    }
}
