//! `#simulation` of a GPU sample's page: Accel-Sim's figures of `bbv gpu simulate` (each pick's
//! cycles and IPC beside its weight, the estimate against the whole list's cycles), put into
//! the page `bbv gpu sample` wrote in place of its note.

use std::fmt::Write as _;

use crate::draw::{esc, note, num};

/// One simulated pick.
#[derive(Clone, Debug)]
pub struct GpuPick {
    /// 0-based launch.
    pub launch: usize,
    /// Kernel name.
    pub kernel: String,
    /// Its weight in the estimate.
    pub weight: f64,
    /// Its cycles.
    pub cycles: u64,
    /// Its thread instructions.
    pub instructions: u64,
}

/// The whole list simulated.
#[derive(Clone, Debug)]
pub struct GpuFull {
    /// Its cycles.
    pub cycles: f64,
    /// Its IPC.
    pub ipc: f64,
    /// 100 x (estimate - full) / full, cycles.
    pub error_pct: f64,
    /// The same for IPC.
    pub ipc_error_pct: f64,
    /// Launches simulated, full over sampled (warming included).
    pub speedup_launches: f64,
    /// Thread instructions simulated, full over sampled (warming included).
    pub speedup_instructions: f64,
    /// Simulation time, full over sampled.
    pub speedup_wall: f64,
}

/// What `bbv gpu simulate` found, for the page.
#[derive(Clone, Debug)]
pub struct GpuSimulation {
    /// The configuration's name and SM version.
    pub config: String,
    /// Its SM version.
    pub sm: u32,
    /// Launches simulated before each pick.
    pub warmup_launches: usize,
    /// The picks.
    pub picks: Vec<GpuPick>,
    /// Estimated cycles of the whole list.
    pub estimate_cycles: f64,
    /// Estimated IPC.
    pub estimate_ipc: f64,
    /// With `--full`.
    pub full: Option<GpuFull>,
}

/// The section's HTML.
pub fn gpu_simulation_section(s: &GpuSimulation) -> String {
    let mut p = String::from("<section id=\"simulation\"><h2>Simulated with Accel-Sim</h2>\n");
    let _ = writeln!(
        p,
        "<p>Configuration {} (sm_{}); each pick simulated after the {} launches before it in the trace (not counted). Estimated cycles = \u{3a3} weight \u{d7} cycles over the picks.</p>",
        esc(&s.config),
        s.sm,
        s.warmup_launches
    );
    p.push_str("<table><tr><th class=\"n\">launch</th><th>kernel</th><th class=\"n\">weight</th><th class=\"n\">cycles</th><th class=\"n\">instructions</th><th class=\"n\">IPC</th></tr>\n");
    for x in &s.picks {
        let _ = writeln!(
            p,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td></tr>",
            x.launch,
            esc(&x.kernel),
            num(x.weight),
            x.cycles,
            x.instructions,
            x.instructions as f64 / (x.cycles as f64).max(1.0)
        );
    }
    p.push_str("</table>\n");
    let _ = write!(
        p,
        "<table id=\"simulation-cycles\"><tr><th>estimated cycles</th><td class=\"n\">{:.0}</td></tr><tr><th>estimated IPC</th><td class=\"n\">{:.4}</td></tr>",
        s.estimate_cycles, s.estimate_ipc
    );
    match &s.full {
        Some(f) => {
            let _ = writeln!(
                p,
                "<tr><th>whole list's cycles</th><td class=\"n\">{:.0}</td></tr><tr><th>whole list's IPC</th><td class=\"n\">{:.4}</td></tr><tr><th>error (cycles)</th><td class=\"n\">{:+.2}%</td></tr><tr><th>error (IPC)</th><td class=\"n\">{:+.2}%</td></tr><tr><th>speedup (launches simulated)</th><td class=\"n\">{:.1}x</td></tr><tr><th>speedup (instructions simulated)</th><td class=\"n\">{:.1}x</td></tr><tr><th>speedup (simulation time)</th><td class=\"n\">{:.1}x</td></tr></table>",
                f.cycles,
                f.ipc,
                f.error_pct,
                f.ipc_error_pct,
                f.speedup_launches,
                f.speedup_instructions,
                f.speedup_wall
            );
        }
        None => {
            p.push_str("</table>\n");
            note(&mut p, "No whole list simulated: `bbv gpu simulate DIR --full LIST` also simulates every launch and reports the estimate's error.");
        }
    }
    p.push_str("</section>\n");
    p
}

/// `page` with its `#simulation` section replaced by `section`; `None` when it has none.
pub fn with_simulation(page: &str, section: &str) -> Option<String> {
    let start = page.find("<section id=\"simulation\">")?;
    let end = start + page[start..].find("</section>")? + "</section>".len();
    let end = end + usize::from(page[end..].starts_with('\n'));
    Some(format!("{}{section}{}", &page[..start], &page[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_replaces_the_note_and_nothing_else() {
        let page = "<p>a</p>\n<section id=\"simulation\"><h2>x</h2>\n<p>note</p></section>\n<section id=\"bic\"></section>\n";
        let s = GpuSimulation {
            config: "SM6_TITANX".into(),
            sm: 61,
            warmup_launches: 4,
            picks: vec![GpuPick {
                launch: 3,
                kernel: "k<T>".into(),
                weight: 2.0,
                cycles: 100,
                instructions: 50,
            }],
            estimate_cycles: 200.0,
            estimate_ipc: 0.5,
            full: None,
        };
        let out = with_simulation(page, &gpu_simulation_section(&s)).unwrap();
        assert!(
            out.starts_with("<p>a</p>\n<section id=\"simulation\"><h2>Simulated with Accel-Sim")
        );
        assert!(out.ends_with("</section>\n<section id=\"bic\"></section>\n"));
        assert!(out.contains("k&lt;T&gt;") && !out.contains("<p>note</p>"));
        assert!(with_simulation("<p>no section</p>", "x").is_none());
    }
}
