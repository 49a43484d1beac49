//! `#simulation`: ChampSim's figures of `bbv simulate` (`simulation.json`): each region's IPC
//! beside its weight, and the estimate against the whole run's CPI.

use std::fmt::Write as _;

use crate::draw::{esc, note, num};
use crate::Report;

/// Width of the IPC and weight bars, in CSS pixels.
const BAR: f64 = 220.0;

pub(crate) fn section(p: &mut String, r: &Report) {
    let name = match r.simulation.as_ref().map(|s| s.simulator.as_str()) {
        Some("sniper") => "Sniper",
        _ => "ChampSim",
    };
    let _ = writeln!(
        p,
        "<section id=\"simulation\"><h2>Simulated with {name}</h2>"
    );
    let Some(s) = &r.simulation else {
        let default = "Not simulated: `bbv trace DIR -- PROG ARGS` writes ChampSim traces of the regions and `bbv simulate DIR [--full -- PROG ARGS]` runs ChampSim on them (docs/champsim.md).";
        match r.simulation_note.is_empty() {
            true => note(p, default),
            false => note(p, &r.simulation_note),
        }
        p.push_str("</section>\n");
        return;
    };
    let _ = writeln!(
        p,
        "<p>{} ({}): estimated CPI = \u{3a3} multiplier \u{d7} cycles / \u{3a3} multiplier \u{d7} instructions over the regions.</p>",
        esc(&s.simulator),
        esc(s.commit.as_deref().unwrap_or("build unknown"))
    );
    let top_ipc = s.regions.iter().map(|x| x.ipc).fold(0.0, f64::max);
    let top_weight = s.regions.iter().map(|x| x.weight).fold(0.0, f64::max);
    let bar = |p: &mut String, v: f64, top: f64, colour: &str| {
        let w = if top > 0.0 && v.is_finite() {
            BAR * v / top
        } else {
            0.0
        };
        let _ = write!(
            p,
            "<svg width=\"{BAR}\" height=\"10\"><rect width=\"{w:.1}\" height=\"10\" fill=\"{colour}\"/></svg>"
        );
    };
    p.push_str("<table><tr><th class=\"n\">region</th><th class=\"n\">weight</th><th></th><th class=\"n\">multiplier</th><th class=\"n\">instructions</th><th class=\"n\">cycles</th><th class=\"n\">IPC</th><th></th></tr>\n");
    for x in &s.regions {
        let _ = write!(
            p,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{:.4}</td><td>",
            x.id, x.weight
        );
        bar(p, x.weight, top_weight, "#777");
        let _ = write!(
            p,
            "</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td><td>",
            num(x.multiplier),
            x.instructions,
            x.cycles,
            x.ipc
        );
        bar(p, x.ipc, top_ipc, "#3a7bd5");
        p.push_str("</td></tr>\n");
    }
    p.push_str("</table>\n");
    let _ = write!(
        p,
        "<table id=\"simulation-cpi\"><tr><th>estimated CPI</th><td class=\"n\">{:.4}</td></tr>",
        s.estimate_cpi
    );
    // The band beside the estimate: 0.4% and 20% must not look alike.
    let band = match (&s.band, &s.no_band) {
        (Some(b), _) => format!(
            "±{:.2}% ({:.4} to {:.4})",
            b.band_pct, b.low_cpi, b.high_cpi
        ),
        (None, why) => format!("none: {}", esc(why.as_deref().unwrap_or("not computed"))),
    };
    let _ = write!(p, "<tr><th>95% band</th><td class=\"n\">{band}</td></tr>");
    match (s.full_cpi, s.error_pct) {
        (Some(full), Some(err)) => {
            let _ = write!(
                p,
                "<tr><th>whole run's CPI</th><td class=\"n\">{full:.4}</td></tr><tr><th>error</th><td class=\"n\">{err:+.2}%</td></tr>"
            );
            let speed = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}x"));
            let _ = write!(
                p,
                "<tr><th>speedup (instructions simulated)</th><td class=\"n\">{}</td></tr><tr><th>speedup (ChampSim's time)</th><td class=\"n\">{}</td></tr>",
                speed(s.speedup_instructions),
                speed(s.speedup_wall)
            );
            p.push_str("</table>\n");
        }
        _ => {
            p.push_str("</table>\n");
            note(p, "No whole run simulated: `bbv simulate DIR --full -- PROG ARGS` also simulates the whole run and reports the estimate's error.");
        }
    }
    p.push_str("</section>\n");
}
