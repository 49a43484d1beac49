//! `bbv gpu sample` as a library call: pick a trace's representative launches and write the
//! sampling folder whole (the reduced kernel list, weights, text report, summary, HTML page).

use std::io::Write;
use std::path::Path;

use bbv_files::AtomicFiles;
use bbv_gpu::output::{sample, SampleOptions};

use crate::PipelineError;

/// Samples the trace of `list` into the folder `output`; returns the text report.
pub fn gpu_sample(
    list: &Path,
    output: &Path,
    options: SampleOptions,
) -> Result<String, PipelineError> {
    let s = sample(list, options)?;
    let mut files = AtomicFiles::default();
    s.write(output, &mut files)?;
    let page = bbv_report::html(&bbv_report::from_gpu_sample(
        &list.display().to_string(),
        &s.counts,
        &s.vectors,
        &s.picks,
        &s.estimates,
        &s.bic,
        s.how,
    ));
    files.write(&output.join("report.html"), |w| {
        w.write_all(page.as_bytes())
    })?;
    files.commit()?;
    Ok(s.report())
}
