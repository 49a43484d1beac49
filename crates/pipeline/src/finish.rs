//! `bbv regions DIR` as a library call: from a run directory alone, place the markers of every
//! point and write the hand-off files, `summary.json` and `summary.txt`.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use crate::markers::{Placer, Profile};
use crate::regions::{self, Entry};
use crate::rundir::{
    self, check_chosen, chosen, read_label_distances, BlockRow, Chosen, ImageRow, Point, Summary,
    Window,
};
use bbv_files::AtomicFiles;

use crate::PipelineError;

/// A finished run directory.
#[derive(Debug)]
pub struct Finished {
    /// `summary.json`'s content.
    pub summary: Summary,
    /// `summary.txt`'s content.
    pub text: String,
}

/// Blocks that threads other than thread 1 ran.
fn other_threads(dir: &Path, s: &Summary) -> Result<HashSet<u32>, PipelineError> {
    let mut ids = HashSet::new();
    for t in s.threads.iter().filter(|t| t.thread != 1) {
        let path = rundir::thread_file(dir, t.thread);
        if !path.exists() {
            continue;
        }
        let mut r = bbv_profile::BbvReader::open(&path)?;
        let mut v = Vec::new();
        while r.next_vector(&mut v)? {
            ids.extend(v.iter().map(|t| t.id));
        }
    }
    Ok(ids)
}

/// `bbv regions DIR`: [`finish`] on the run directory's staged next state, swapped in whole
/// when done (a failure or a kill leaves the folder as it was).
pub fn update_regions(dir: &Path, warmup: Option<u64>) -> Result<Finished, PipelineError> {
    rundir::update(dir, |d| finish(d, warmup))
}

/// From a run directory alone, places the markers of every point and writes the hand-off
/// files, `summary.json` and `summary.txt` (all or none; `bbv regions` stages the folder
/// first: [`update_regions`]).
pub fn finish(dir: &Path, warmup: Option<u64>) -> Result<Finished, PipelineError> {
    let mut summary = rundir::read_summary(dir)?;
    if let Some(w) = warmup {
        summary.warmup = w;
    }
    let need = |name: &str| -> Result<PathBuf, PipelineError> {
        let p = dir.join(name);
        if p.exists() {
            Ok(p)
        } else {
            Err(PipelineError::Invalid(format!(
                "{}: missing; {} is not a complete `bbv run` output directory",
                p.display(),
                dir.display()
            )))
        }
    };
    let blocks = rundir::read_blocks(&need(bbv_rundir::files::BLOCKS)?)?;
    let images = rundir::read_images(&need(bbv_rundir::files::IMAGES)?)?;
    let windows = rundir::read_windows(&need(bbv_rundir::files::MARKS)?)?;
    if windows.is_empty() && summary.intervals > 0 {
        return Err(PipelineError::Invalid(format!(
            "{}: empty, but the run has {} intervals (the plugin writes a line per cut)",
            dir.join(bbv_rundir::files::MARKS).display(),
            summary.intervals
        )));
    }
    let mut points = Vec::new();
    let mut profile = Profile::default();
    if summary.intervals > 0 && summary.regions_mode == crate::rundir::Regions::Looppoint {
        need(bbv_rundir::files::SIMPOINTS)?;
        need(bbv_rundir::files::GLOBAL_BB)?;
        need(bbv_rundir::files::SLICES)?;
        let entry = main_entry(Path::new(&summary.program.path), &images);
        let input = crate::looppoint::Inputs {
            blocks: &blocks,
            images: &images,
            windows: &windows,
            entry: entry.as_ref(),
        };
        points = crate::looppoint::points(dir, &summary, &input)?;
        summary.k = points.len();
    } else if summary.intervals > 0 && summary.clustered == crate::rundir::Clustered::Main {
        need(bbv_rundir::files::SIMPOINTS)?;
        let (chosen, labels) = chosen(dir)?;
        if labels.len() as u64 != summary.intervals {
            return Err(PipelineError::Invalid(format!(
                "{}: {} labels for {} intervals",
                dir.join(bbv_rundir::files::LABELS).display(),
                labels.len(),
                summary.intervals
            )));
        }
        check_chosen(dir, &chosen, summary.intervals, "interval")?;
        need(bbv_rundir::files::BB)?;
        let rows = Rows {
            blocks: &blocks,
            images: &images,
            windows: &windows,
        };
        // Stand-ins and wider regions need counts at many more cuts (a copy of every block's
        // count each): read only when some representative has no marker.
        let placed = match place(dir, &summary, &rows, &chosen, &labels, None) {
            Err(PipelineError::NoMarker { .. }) => {
                let distances = read_label_distances(&dir.join(bbv_rundir::files::LABELS))?;
                let mut fallback = regions::Fallback {
                    stand_ins: regions::stand_ins(&chosen, &labels, &distances),
                    forward: Vec::new(),
                };
                // A point none of whose own cluster delimits (the dynamic loader's start-up,
                // where no marker may go) may stand for it from the first interval after it
                // that a marker delimits: tried for one such point at a time, since each
                // needs the counts at many cuts.
                loop {
                    match place(dir, &summary, &rows, &chosen, &labels, Some(&fallback)) {
                        Err(PipelineError::NoMarker { interval, .. })
                            if !fallback.forward.contains(&interval) =>
                        {
                            fallback.forward.push(interval)
                        }
                        placed => break placed,
                    }
                }
            }
            placed => placed,
        };
        (profile, points) = placed?;
        summary.k = labels.iter().max().map_or(0, |&m| m + 1);
    }
    summary.points = points;
    let validation = crate::validate::read(dir)?;
    let text = crate::job_text::summary_text(dir, &summary, &profile, &blocks, validation.as_ref());
    // The report shows the points' markers; it is built, like every output, before any is
    // written, so that a failure leaves the directory as it was.
    let page = bbv_report::run_report_page(dir, &summary)?;
    write_all(dir, &summary, &images, &text, &page)?;
    Ok(Finished { summary, text })
}

/// What a run directory says of its blocks, images and cut windows.
struct Rows<'a> {
    blocks: &'a [BlockRow],
    images: &'a [ImageRow],
    windows: &'a [Window],
}

/// Reads the vectors at the cuts the points may need and places the points' markers (with
/// `fallback` stand-ins and wider regions; see [`regions::build`]).
fn place(
    dir: &Path,
    summary: &Summary,
    rows: &Rows,
    chosen: &[Chosen],
    labels: &[usize],
    fallback: Option<&regions::Fallback>,
) -> Result<(Profile, Vec<Point>), PipelineError> {
    let n_warm = regions::warmup_intervals(summary.warmup, summary.interval);
    let reach = if fallback.is_some() {
        regions::REACH
    } else {
        0
    };
    let forward = fallback.into_iter().flat_map(|f| &f.forward);
    let tried: BTreeSet<u64> = chosen
        .iter()
        .map(|c| c.interval)
        .chain(
            fallback
                .into_iter()
                .flat_map(|f| f.stand_ins.iter().flatten().copied()),
        )
        .chain(forward.flat_map(|&i| i + 1..=i + regions::FORWARD))
        .filter(|&i| i < summary.intervals)
        .collect();
    let mut cuts = BTreeSet::new();
    for &i in &tried {
        cuts.extend(i.saturating_sub(2 * n_warm + reach)..=i + 1 + reach);
    }
    let profile = Profile::read(
        &dir.join(bbv_rundir::files::BB),
        rows.blocks.len(),
        &cuts,
        &tried,
    )?;
    if profile.lengths.len() as u64 != summary.intervals {
        return Err(PipelineError::Invalid(format!(
            "{}: {} intervals, but summary.json says {}",
            dir.join(bbv_rundir::files::BB).display(),
            profile.lengths.len(),
            summary.intervals
        )));
    }
    let others = other_threads(dir, summary)?;
    let placer = Placer::new(
        rows.blocks,
        rows.images,
        rows.windows,
        others,
        &profile,
        summary.interval,
    );
    let entry = main_entry(Path::new(&summary.program.path), rows.images);
    let points = regions::build(
        &placer,
        &profile,
        chosen,
        fallback,
        labels,
        [summary.interval, summary.warmup],
        entry.as_ref(),
    )?;
    Ok((profile, points))
}

/// The program's entry point as a marker; the image is found by its resolved path, since the
/// command may name a symlink (`python3` runs `python3.11`).
fn main_entry(path: &Path, images: &[ImageRow]) -> Option<Entry> {
    let real = std::fs::canonicalize(path).ok();
    let same = |p: &Path| real.is_some() && std::fs::canonicalize(p).ok() == real;
    let name = path.file_name()?.to_string_lossy();
    let image = images
        .iter()
        .find(|i| same(&i.path))
        .or_else(|| images.iter().find(|i| i.name == name))?;
    Some(Entry {
        image: image.name.clone(),
        offset: bbv_collect::ElfFacts::read(&image.path)?.entry,
    })
}

fn write_all(
    dir: &Path,
    summary: &Summary,
    images: &[ImageRow],
    text: &str,
    page: &str,
) -> Result<(), PipelineError> {
    let points: &[Point] = &summary.points;
    let mut files = AtomicFiles::default();
    files.write(&dir.join(bbv_rundir::files::SUMMARY), |w| {
        rundir::write_summary(w, summary)
    })?;
    files.write(&dir.join(bbv_rundir::files::SUMMARY_TXT), |w| {
        std::io::Write::write_all(w, text.as_bytes())
    })?;
    files.write(&dir.join(bbv_rundir::files::REPORT), |w| {
        std::io::Write::write_all(w, page.as_bytes())
    })?;
    if !points.is_empty() {
        for sub in ["gem5", "nemu"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| PipelineError::io(&d, e))?;
        }
        let mut csv = Vec::new();
        regions::write_csv(&mut csv, points, images)?;
        files.write(&dir.join(bbv_rundir::files::REGIONS_CSV), |w| {
            std::io::Write::write_all(w, &csv)
        })?;
        let mut json = Vec::new();
        regions::write_json(&mut json, points, images)?;
        files.write(&dir.join(bbv_rundir::files::REGIONS_JSON), |w| {
            std::io::Write::write_all(w, &json)
        })?;
        files.write(&dir.join(bbv_rundir::files::SNIPER), |w| {
            regions::write_sniper(w, points)
        })?;
        let small = |name: &str| bbv_files::input::read_bytes(&dir.join(name), 64 << 20);
        let simpoints = small(bbv_rundir::files::SIMPOINTS)?;
        let weights = small(bbv_rundir::files::WEIGHTS)?;
        for (sub, s, w) in [
            ("gem5", "simpoints", "weights"),
            ("nemu", "simpoints0", "weights0"),
        ] {
            files.write(&dir.join(sub).join(s), |f| {
                std::io::Write::write_all(f, &simpoints)
            })?;
            files.write(&dir.join(sub).join(w), |f| {
                std::io::Write::write_all(f, &weights)
            })?;
        }
        let readme = regions::gem5_readme(
            &summary.program.path,
            &summary.program.args,
            summary.interval,
            regions::warmup_intervals(summary.warmup, summary.interval) * summary.interval,
            &summary.count_rep,
        );
        files.write(&dir.join(bbv_rundir::files::GEM5).join("README"), |w| {
            std::io::Write::write_all(w, readme.as_bytes())
        })?;
    }
    files.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_image_is_the_file_a_symlinked_command_resolves_to() {
        let exe = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(&exe, &alias).unwrap();
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let images = vec![ImageRow {
            name: name.clone(),
            path: exe.clone(),
            fixed: false,
            build_id: None,
            bias: 0,
        }];
        let e = main_entry(&alias, &images).expect("found through the symlink");
        assert_eq!(e.image, name);
        assert_eq!(e.offset, bbv_collect::ElfFacts::read(&exe).unwrap().entry);
        assert!(main_entry(&dir.path().join("missing"), &images).is_none());
    }
}
