//! `simulation.json` and the report page written together (the page's #simulation section
//! shows the new figures), for ChampSim's and Sniper's simulations alike.

use std::io::Write as _;
use std::path::Path;

use bbv_files::AtomicFiles;
use bbv_rundir::simulation::Simulation;
use bbv_rundir::Summary;

use crate::ReplayError;

/// Adds `dir/simulation.json` and `dir/report.html` (of `s` with `sim`) to `files`.
pub(crate) fn write(
    files: &mut AtomicFiles,
    dir: &Path,
    s: &Summary,
    sim: &Simulation,
) -> Result<(), ReplayError> {
    let report = bbv_report::from_summary_with(dir, s, Some(sim.clone()))?;
    let page = bbv_report::html(&report);
    files.write(&dir.join(bbv_rundir::files::SIMULATION), |w| {
        serde_json::to_writer_pretty(&mut *w, sim)?;
        w.write_all(b"\n")
    })?;
    files.write(&dir.join(bbv_rundir::files::REPORT), |w| {
        w.write_all(page.as_bytes())
    })?;
    Ok(())
}
