//! `bbv run` (collect, cluster, finish) and `bbv regions` (finish) as library calls.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use bbv_collect::{Collected, GuestStatus};
use bbv_simpoint::{Observer, Options, PostResult, Prepared, Projection};

use crate::markers::{Placer, Profile};
use crate::regions::{self, Chosen, Entry};
use crate::rundir::{self, ImageRow, Point, Program, Summary, ThreadTotal, LAYOUT};
use crate::{AtomicFiles, PipelineError};

/// What `bbv run` asks for.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The collection (its `work_dir` should be `out`, so files are renamed into place).
    pub collect: bbv_collect::Request,
    /// The run directory.
    pub out: PathBuf,
    /// Largest k tried.
    pub max_k: usize,
    /// Cluster every thread's intervals together instead of the main thread's.
    pub threads_all: bool,
    /// Warmup instructions before each region (None: one interval).
    pub warmup: Option<u64>,
}

/// How the guest ended, and whether bbv finished its files afterwards.
pub struct RunOutcome {
    /// The guest's status.
    pub status: GuestStatus,
    /// The finished run directory, or why it could not be finished.
    pub finished: Result<Finished, PipelineError>,
}

/// A finished run directory.
#[derive(Debug)]
pub struct Finished {
    /// `summary.json`'s content.
    pub summary: Summary,
    /// `summary.txt`'s content.
    pub text: String,
}

/// Runs the main job: collect, place the raw files, cluster, then [`finish`].
/// `Err` = nothing ran (bad request); the guest's failures are in the outcome.
pub fn run(req: &RunRequest, observer: &dyn Observer) -> Result<RunOutcome, PipelineError> {
    let prepared = bbv_collect::prepare(req.collect.clone())?;
    let qemu = bbv_collect::qemu_version(&prepared.qemu).unwrap_or_else(|| "unknown".into());
    let program = prepared.program.clone();
    let outcome = prepared.run()?;
    let finished = (|| {
        let c = outcome.collected?;
        place(&c, &req.out)?;
        let summary = run_facts(req, &c, &program, qemu)?;
        let rows = if req.threads_all {
            let input = req.out.join("bb.all");
            concatenate(&c, &req.out, &input)?
        } else {
            c.threads.first().map_or(0, |t| t.intervals)
        };
        let mut files = AtomicFiles::default();
        let summary = Summary {
            intervals: rows,
            ..summary
        };
        files.write(&req.out.join("summary.json"), |w| {
            rundir::write_summary(w, &summary)
        })?;
        files.commit()?;
        if rows > 0 {
            let input = if req.threads_all {
                req.out.join("bb.all")
            } else {
                req.out.join("bb.out")
            };
            cluster_file(&input, req.max_k, &req.out.join("simpoint"), observer)?;
        }
        finish(&req.out, None)
    })();
    Ok(RunOutcome {
        status: outcome.status,
        finished,
    })
}

/// Moves the collected files into the run directory and writes the block and image tables.
fn place(c: &Collected, dir: &Path) -> Result<(), PipelineError> {
    let mut files = AtomicFiles::default();
    files.write(&dir.join("pc.out"), |w| bbv_collect::write_pc(w, &c.blocks))?;
    files.write(&dir.join("blocks.tsv"), |w| {
        bbv_collect::write_blocks_tsv(w, &c.blocks, &c.images)
    })?;
    let images: Vec<ImageRow> = c
        .images
        .iter()
        .map(|i| ImageRow {
            name: i.name(),
            path: i.path.clone(),
            fixed: i.fixed,
            build_id: i.build_id.clone(),
            bias: i.bias,
        })
        .collect();
    files.write(&dir.join("images.tsv"), |w| {
        rundir::write_images(w, &images)
    })?;
    files.commit()?;
    for t in &c.threads {
        if let Some(src) = &t.bb {
            bbv_collect::move_file(src, &rundir::thread_file(dir, t.number))?;
        }
    }
    let marks = dir.join("marks.out");
    match c.threads.first().and_then(|t| t.marks.as_ref()) {
        Some(m) => bbv_collect::move_file(m, &marks)?,
        None => std::fs::write(&marks, b"").map_err(|e| PipelineError::io(&marks, e))?,
    }
    Ok(())
}

fn run_facts(
    req: &RunRequest,
    c: &Collected,
    program: &Path,
    qemu: String,
) -> Result<Summary, PipelineError> {
    let r = &req.collect;
    Ok(Summary {
        layout: LAYOUT,
        instructions: c.threads.iter().map(|t| t.instructions).sum(),
        threads: c
            .threads
            .iter()
            .map(|t| ThreadTotal {
                thread: t.number,
                instructions: t.instructions,
            })
            .collect(),
        interval: r.interval,
        intervals: 0,
        k: 0,
        max_k: req.max_k,
        qemu,
        program: Program {
            path: program.display().to_string(),
            build_id: bbv_collect::ElfFacts::read(program).and_then(|f| f.build_id),
            args: r
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        },
        count_rep: if r.rep_iterations {
            "iteration"
        } else {
            "instance"
        }
        .into(),
        exact: r.exact,
        clustered: if req.threads_all { "all" } else { "main" }.into(),
        warmup: req.warmup.unwrap_or(r.interval),
        points: Vec::new(),
    })
}

/// Writes every thread's vectors, in thread order, into one file (`--threads all`).
fn concatenate(c: &Collected, dir: &Path, out: &Path) -> Result<u64, PipelineError> {
    let mut rows = 0;
    let mut files = AtomicFiles::default();
    let mut failure = None;
    files.write(out, |w| {
        let mut bw = bbv_profile::BbvWriter::new(w);
        for t in &c.threads {
            let path = rundir::thread_file(dir, t.number);
            let mut r = match bbv_profile::BbvReader::open(&path) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(e);
                    return Ok(());
                }
            };
            let mut v = Vec::new();
            loop {
                match r.next_vector(&mut v) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        failure = Some(e);
                        return Ok(());
                    }
                }
                let pairs: Vec<(u32, u64)> = v.iter().map(|t| (t.id, t.value as u64)).collect();
                bw.write_vector(&pairs)?;
                rows += 1;
            }
        }
        bw.finish().map(drop)
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    files.commit()?;
    Ok(rows)
}

/// Clusters a BBV file as `bbv simpoint FILE --max-k K -o PREFIX` does (SimPoint 3.2's
/// defaults) and writes `PREFIX.simpoints`, `.weights` and `.labels`.
pub fn cluster_file(
    input: &Path,
    max_k: usize,
    prefix: &Path,
    observer: &dyn Observer,
) -> Result<(), PipelineError> {
    let projection = Projection::Random {
        dim: bbv_simpoint::DEFAULT_DIM,
        seed: i64::from(bbv_simpoint::DEFAULT_SEED_PROJ),
    };
    let mut data = bbv_simpoint::load_file(input, &projection, |_| {})?.vectors;
    let w = 1.0 / data.rows() as f64;
    data.weights.iter_mut().for_each(|x| *x = w);
    let opts = Options {
        k: bbv_simpoint::KChoice::Search {
            max_k: max_k.min(data.rows()),
        },
        ..Options::default()
    };
    let prep = Prepared::new(&data, &opts)?;
    let result = bbv_simpoint::cluster(&prep, &opts, observer)?;
    let post = PostResult::new(&data, &result.runs[result.best].centres);
    let name = |ext: &str| prefix.with_extension(ext);
    let mut files = AtomicFiles::default();
    files.write(&name("simpoints"), |w| post.write_simpoints(w, 1.0))?;
    files.write(&name("weights"), |w| post.write_weights(w, 1.0))?;
    files.write(&name("labels"), |w| post.write_labels(w))?;
    files.commit()?;
    Ok(())
}

/// The chosen points (from `simpoint.simpoints` and `.weights`) and every interval's cluster.
fn chosen(dir: &Path) -> Result<(Vec<Chosen>, Vec<usize>), PipelineError> {
    let prefix = dir.join("simpoint");
    let points = rundir::read_pairs::<u64>(&prefix.with_extension("simpoints"))?;
    let weights = rundir::read_pairs::<f64>(&prefix.with_extension("weights"))?;
    // Labels lines are `CLUSTER DISTANCE`.
    let labels = rundir::read_pairs::<usize>(&prefix.with_extension("labels"))?;
    let weight_of: HashMap<usize, f64> = weights.iter().map(|&(w, c)| (c, w)).collect();
    let mut chosen: Vec<Chosen> = points
        .iter()
        .map(|&(interval, cluster)| {
            let weight = weight_of.get(&cluster).copied().ok_or_else(|| {
                PipelineError::Invalid(format!(
                    "{}: cluster {cluster} has a simulation point but no weight",
                    prefix.with_extension("weights").display()
                ))
            })?;
            Ok(Chosen {
                cluster,
                interval,
                weight,
            })
        })
        .collect::<Result<_, PipelineError>>()?;
    chosen.sort_by(|x, y| {
        y.weight
            .total_cmp(&x.weight)
            .then(x.interval.cmp(&y.interval))
    });
    Ok((chosen, labels.into_iter().map(|(l, _)| l).collect()))
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

/// `bbv regions DIR`: from a run directory alone, places the markers of every point and
/// writes the hand-off files, `summary.json` and `summary.txt` (all or none).
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
    let blocks = rundir::read_blocks(&need("blocks.tsv")?)?;
    let images = rundir::read_images(&need("images.tsv")?)?;
    let windows = rundir::read_windows(&need("marks.out")?)?;
    let mut points = Vec::new();
    let mut profile = Profile::default();
    if summary.intervals > 0 && summary.clustered == "main" {
        need("simpoint.simpoints")?;
        let (chosen, labels) = chosen(dir)?;
        if labels.len() as u64 != summary.intervals {
            return Err(PipelineError::Invalid(format!(
                "{}: {} labels for {} intervals",
                dir.join("simpoint.labels").display(),
                labels.len(),
                summary.intervals
            )));
        }
        let n_warm = regions::warmup_intervals(summary.warmup, summary.interval);
        let mut cuts = BTreeSet::new();
        for c in &chosen {
            if c.interval >= summary.intervals {
                return Err(PipelineError::Invalid(format!(
                    "{}: interval {} is beyond the {} intervals of the run",
                    dir.join("simpoint.simpoints").display(),
                    c.interval,
                    summary.intervals
                )));
            }
            let from = c.interval.saturating_sub(2 * n_warm);
            cuts.extend(from..=c.interval + 1);
        }
        let keep = chosen.iter().map(|c| c.interval).collect();
        profile = Profile::read(&need("bb.out")?, blocks.len(), &cuts, &keep)?;
        if profile.lengths.len() as u64 != summary.intervals {
            return Err(PipelineError::Invalid(format!(
                "{}: {} intervals, but summary.json says {}",
                dir.join("bb.out").display(),
                profile.lengths.len(),
                summary.intervals
            )));
        }
        let others = other_threads(dir, &summary)?;
        let placer = Placer::new(
            &blocks,
            &images,
            &windows,
            others,
            &profile,
            summary.interval,
        );
        let entry = main_entry(Path::new(&summary.program.path), &images);
        points = regions::build(
            &placer,
            &profile,
            &chosen,
            &labels,
            summary.warmup,
            summary.interval,
            entry.as_ref(),
        )?;
        summary.k = labels.iter().max().map_or(0, |&m| m + 1);
    }
    summary.points = points;
    let text = crate::job_text::summary_text(dir, &summary, &profile, &blocks);
    write_all(dir, &summary, &images, &text)?;
    Ok(Finished { summary, text })
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
) -> Result<(), PipelineError> {
    let points: &[Point] = &summary.points;
    let mut files = AtomicFiles::default();
    files.write(&dir.join("summary.json"), |w| {
        rundir::write_summary(w, summary)
    })?;
    files.write(&dir.join("summary.txt"), |w| {
        std::io::Write::write_all(w, text.as_bytes())
    })?;
    if !points.is_empty() {
        for sub in ["gem5", "nemu"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| PipelineError::io(&d, e))?;
        }
        let mut csv = Vec::new();
        regions::write_csv(&mut csv, points, images)?;
        files.write(&dir.join("regions.csv"), |w| {
            std::io::Write::write_all(w, &csv)
        })?;
        let mut json = Vec::new();
        regions::write_json(&mut json, points, images)?;
        files.write(&dir.join("regions.json"), |w| {
            std::io::Write::write_all(w, &json)
        })?;
        files.write(&dir.join("regions.sniper.txt"), |w| {
            regions::write_sniper(w, points)
        })?;
        let simpoints = std::fs::read(dir.join("simpoint.simpoints"))
            .map_err(|e| PipelineError::io(dir.join("simpoint.simpoints"), e))?;
        let weights = std::fs::read(dir.join("simpoint.weights"))
            .map_err(|e| PipelineError::io(dir.join("simpoint.weights"), e))?;
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
        files.write(&dir.join("gem5").join("README"), |w| {
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
