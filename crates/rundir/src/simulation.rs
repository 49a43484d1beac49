//! `simulation.json`: what `bbv simulate` measured with ChampSim (written by bbv-pipeline, read
//! back by the report).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::RundirError;

/// One region simulated.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RegionSim {
    /// Region id.
    pub id: usize,
    /// SimPoint's weight.
    pub weight: f64,
    /// Instructions the region stands for over its own.
    pub multiplier: f64,
    /// Simulated instructions.
    pub instructions: u64,
    /// Their cycles.
    pub cycles: u64,
    /// Instructions per cycle.
    pub ipc: f64,
    /// ChampSim's wall seconds (warmup included).
    pub seconds: f64,
    /// Its wall seconds warming.
    #[serde(default)]
    pub warmup_seconds: f64,
    /// Its CPU seconds in all and warming (None where the system did not say): what the
    /// simulation costs, however many processes shared the cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Its CPU seconds warming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_cpu_seconds: Option<f64>,
}

/// `simulation.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Simulation {
    /// Always `champsim`.
    pub simulator: String,
    /// The ChampSim build (scripts/champsim's source id), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Per region.
    pub regions: Vec<RegionSim>,
    /// The whole program's CPI estimated from the regions.
    pub estimate_cpi: f64,
    /// The whole run's CPI, with `--full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_cpi: Option<f64>,
    /// 100 x (estimate - full) / full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_pct: Option<f64>,
    /// Instructions simulated in full over those simulated for the regions (warmups included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_instructions: Option<f64>,
    /// ChampSim's wall time in full over the regions' together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_wall: Option<f64>,
    /// ChampSim's CPU time in full over the regions' together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_cpu: Option<f64>,
    /// The share of the regions' ChampSim time spent warming (CPU time where every region
    /// has it, else wall time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_share: Option<f64>,
    /// Half-width of the estimate's 95% interval, percent of the estimate (None: the run has
    /// no per-interval metrics, or its regions are LoopPoint slices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_pct: Option<f64>,
    /// The band and its derivation; or why there is none (`no_band`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<crate::band::Band>,
    /// Why the estimate has no band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_band: Option<String>,
}

/// The share of `regions`' ChampSim time spent warming: CPU time where every region has it,
/// else wall time (None without time).
pub fn warmup_share(regions: &[RegionSim]) -> Option<f64> {
    let cpu: Option<Vec<(f64, f64)>> = regions
        .iter()
        .map(|r| Some((r.warmup_cpu_seconds?, r.cpu_seconds?)))
        .collect();
    let (warm, all) = match cpu {
        Some(c) => c.iter().fold((0.0, 0.0), |a, x| (a.0 + x.0, a.1 + x.1)),
        None => regions
            .iter()
            .fold((0.0, 0.0), |a, r| (a.0 + r.warmup_seconds, a.1 + r.seconds)),
    };
    (all > 0.0).then(|| warm / all)
}

impl Simulation {
    /// Why `--max-band PCT` (`max`, a fraction) fails: the band is wider (None when it is not,
    /// or no maximum was given).
    pub fn band_over(&self, max: Option<f64>) -> Option<String> {
        let band = self.band_pct.unwrap_or(0.0);
        let m = max.filter(|&m| band > 100.0 * m)?;
        Some(format!(
            "the 95% band ±{band:.2}% is wider than --max-band {}%",
            100.0 * m
        ))
    }

    /// The table `bbv simulate` prints: each region's IPC, the estimate and, with a full run,
    /// its error and speedups.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        // The band first: an estimate is only as good as its interval.
        let mut t = match (&self.band, &self.no_band) {
            (Some(b), _) => format!(
                "estimated CPI {:.4} ± {:.2}% (95% band {:.4} to {:.4})\n",
                self.estimate_cpi, b.band_pct, b.low_cpi, b.high_cpi
            ),
            (None, why) => format!(
                "estimated CPI {:.4}, no error band: {}\n",
                self.estimate_cpi,
                why.as_deref().unwrap_or("none computed")
            ),
        };
        t.push_str("region  weight  multiplier  instructions  cycles  IPC\n");
        for r in &self.regions {
            let _ = writeln!(
                t,
                "{:>6}  {:.4}  {:>10.2}  {:>12}  {:>6}  {:.3}",
                r.id, r.weight, r.multiplier, r.instructions, r.cycles, r.ipc
            );
        }
        if let Some(w) = self.warmup_share {
            let _ = writeln!(
                t,
                "warmups: {:.0}% of the regions' ChampSim time",
                100.0 * w
            );
        }
        if let (Some(full), Some(err)) = (self.full_cpi, self.error_pct) {
            let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}x"));
            let _ = writeln!(
                t,
                "full run CPI {full:.4}: error {err:+.2}%; speedup {} in instructions, {} in \
                 time ({} in CPU time)",
                x(self.speedup_instructions),
                x(self.speedup_wall),
                x(self.speedup_cpu)
            );
        }
        t
    }
}

/// The whole run's CPI estimated from its regions: Σ multiplier × cycles / Σ multiplier ×
/// instructions (each region standing for its cluster's instructions).
pub fn estimate_cpi(regions: &[RegionSim]) -> f64 {
    let (cycles, instructions) = regions.iter().fold((0.0, 0.0), |(c, n), r| {
        (
            c + r.multiplier * r.cycles as f64,
            n + r.multiplier * r.instructions as f64,
        )
    });
    cycles / f64::max(instructions, 1.0)
}

/// The estimate's error against the whole run, in percent (None without a whole run).
pub fn error_pct(estimate_cpi: f64, full_cpi: Option<f64>) -> Option<f64> {
    full_cpi.map(|f| 100.0 * (estimate_cpi - f) / f)
}

/// Reads `dir/simulation.json`, if the run has one.
pub fn read(dir: &Path) -> Result<Option<Simulation>, RundirError> {
    crate::read_optional_json(dir, crate::files::SIMULATION, "bbv simulate")
}
