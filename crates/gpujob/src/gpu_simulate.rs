//! `bbv gpu simulate` as a library call: Accel-Sim on every launch `bbv gpu sample` picked
//! (each in a simulator process of its own, after the launches that preceded it in the trace,
//! to warm the L2 cache as the full run had it), the whole run's cycles estimated from the
//! picks and their weights, and with a full list the error against simulating every launch.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use accelsim_trace::{Command, KernelList};
use bbv_files::AtomicFiles;
use bbv_gpusim::{Config, Simulated, Simulator};

use crate::gpu_job::read_json;
use crate::GpuJobError;

/// A `bbv gpu simulate` job.
#[derive(Clone, Debug)]
pub struct GpuSimulate {
    /// The `bbv gpu sample` folder (of a trace).
    pub dir: PathBuf,
    /// `--accelsim`: the build's folder or its accel-sim.out.
    pub accelsim: Option<PathBuf>,
    /// `--config`: a tested configuration's name.
    pub config: Option<String>,
    /// Simulator processes at a time (default: the cores).
    pub jobs: Option<usize>,
    /// Launches of the trace simulated before each pick, not counted (cache warming).
    pub warmup_launches: usize,
    /// The whole trace's list, simulated in full for the error.
    pub full: Option<PathBuf>,
}

/// One pick: its launch (0-based in the trace), kernel, weight and trace file.
#[derive(Clone, Debug)]
struct Pick {
    launch: usize,
    kernel: String,
    weight: f64,
    file: PathBuf,
}

/// What `bbv gpu simulate` found.
pub struct GpuSimulation {
    /// `simulation.json`'s content.
    pub file: bbv_rundir::gpu_simulation::GpuSimulationFile,
    /// Lines for the user.
    pub report: String,
}

fn invalid(m: String) -> GpuJobError {
    GpuJobError::Invalid(m)
}

/// The picks of a sample folder: weights.csv's rows beside the reduced list's launches, which
/// follow launch order; every trace file must still be where the list points.
fn picks(dir: &Path) -> Result<Vec<Pick>, GpuJobError> {
    let wpath = dir.join(bbv_rundir::files::GPU_WEIGHTS);
    let text = bbv_files::input::read_text(&wpath, 1 << 26)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let bad = || {
            invalid(format!(
                "{}:{}: expected launch,kernel,weight,launches_represented",
                wpath.display(),
                i + 1
            ))
        };
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 4 {
            return Err(bad());
        }
        let launch: usize = f[0].parse().map_err(|_| bad())?;
        let weight: f64 = f[2].parse().map_err(|_| bad())?;
        // A pick stands for a positive share of the run: a zero, negative or endless weight
        // would make the estimate silently wrong, and one past 10^15 launches' worth infinite
        // (written as `null`).
        if !weight.is_finite() || weight <= 0.0 || weight > 1e15 {
            return Err(invalid(format!(
                "{}:{}: weight {} of launch {launch}: a pick's weight must be a positive number up to 10^15",
                wpath.display(),
                i + 1,
                bbv_files::input::quote(f[2].as_bytes())
            )));
        }
        rows.push((launch, f[1].to_string(), weight));
    }
    rows.sort_by_key(|r| r.0);
    if let Some(w) = rows.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(invalid(format!(
            "{}: launch {} is picked twice",
            wpath.display(),
            w[0].0
        )));
    }
    let lpath = dir.join("kernelslist.g");
    let list = KernelList::open(&lpath).map_err(bbv_gpu::GpuError::from)?;
    let files: Vec<&Path> = list.kernels().collect();
    if files.len() != rows.len() || rows.is_empty() {
        return Err(invalid(format!(
            "{}: {} launches, but {} names {} picks: not the list bbv gpu sample wrote beside it",
            lpath.display(),
            files.len(),
            wpath.display(),
            rows.len()
        )));
    }
    let mut out = Vec::new();
    for ((launch, kernel, weight), file) in rows.into_iter().zip(files) {
        if !file.exists() {
            return Err(invalid(format!(
                "{}: the trace of launch {launch} is gone (the link points at {}): the trace moved since bbv gpu sample; sample it again",
                file.display(),
                std::fs::read_link(file).unwrap_or_default().display()
            )));
        }
        out.push(Pick {
            launch,
            kernel,
            weight,
            file: file.to_path_buf(),
        });
    }
    Ok(out)
}

/// The traces' SM version, which every pick must share.
fn sm_of(picks: &[Pick]) -> Result<u32, GpuJobError> {
    let mut sm = None;
    for p in picks {
        let r = accelsim_trace::TraceReader::open(&p.file).map_err(bbv_gpu::GpuError::from)?;
        let v = r.header().binary_version;
        match sm {
            None => sm = Some(v),
            Some(s) if s != v => {
                return Err(invalid(format!(
                "{}: sm_{v}, but other picks are sm_{s}: one configuration cannot simulate both",
                p.file.display()
            )))
            }
            _ => {}
        }
    }
    sm.ok_or_else(|| invalid("no pick to simulate".into()))
}

/// The list one pick is simulated from, in `folder`: the trace's memory copies before it, its
/// `warmup` preceding launches, then the pick itself (each a link `kernel-N.traceg`).
fn pick_list(
    pick: &Pick,
    trace: Option<&KernelList>,
    warmup: usize,
    folder: &Path,
) -> Result<PathBuf, GpuJobError> {
    std::fs::create_dir_all(folder).map_err(|e| GpuJobError::io(folder, e))?;
    let mut lines = String::new();
    let link = |lines: &mut String, n: usize, target: &Path| -> Result<(), GpuJobError> {
        let name = format!("kernel-{n}.traceg");
        let target = std::fs::canonicalize(target).map_err(|e| GpuJobError::io(target, e))?;
        std::os::unix::fs::symlink(&target, folder.join(&name))
            .map_err(|e| GpuJobError::io(folder.join(&name), e))?;
        lines.push_str(&name);
        lines.push('\n');
        Ok(())
    };
    if let Some(trace) = trace {
        let mut launch = 0;
        for c in &trace.commands {
            match c {
                Command::MemcpyHtoD { text, .. } if launch <= pick.launch => {
                    lines.push_str(text);
                    lines.push('\n');
                }
                Command::Kernel { path, .. } if launch + warmup >= pick.launch => {
                    if launch == pick.launch {
                        break;
                    }
                    link(&mut lines, launch + 1, path)?;
                    launch += 1;
                }
                Command::Kernel { .. } => launch += 1,
                _ => {}
            }
        }
    }
    link(&mut lines, pick.launch + 1, &pick.file)?;
    let list = folder.join("kernelslist.g");
    std::fs::write(&list, lines).map_err(|e| GpuJobError::io(&list, e))?;
    Ok(list)
}

/// Runs every pick, `jobs` at a time; per pick, its launch's figures (the last of its list).
fn simulate_picks(
    sim: &Simulator,
    config: &Config,
    picks: &[Pick],
    trace: Option<&KernelList>,
    job: &GpuSimulate,
    jobs: usize,
) -> Result<Vec<(bbv_gpusim::Launch, Simulated)>, GpuJobError> {
    let work = tempfile::Builder::new()
        .prefix(&bbv_files::interrupt::tagged("gpu-simulate"))
        .tempdir()
        .map_err(|e| GpuJobError::io(std::env::temp_dir(), e))?;
    let next = AtomicUsize::new(0);
    let results: Mutex<BTreeMap<usize, Result<Simulated, GpuJobError>>> = Default::default();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, picks.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(p) = picks.get(i) else { break };
                let folder = work.path().join(format!("pick-{}", p.launch));
                let r = pick_list(p, trace, job.warmup_launches, &folder)
                    .and_then(|list| Ok(sim.run(config, &list)?));
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(i, r);
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for (p, (_, r)) in picks.iter().zip(results) {
        let s = r?;
        // Every pick simulated, as itself: no silent skip.
        let last = s.launches.last().cloned().filter(|l| l.kernel == p.kernel);
        let Some(last) = last else {
            return Err(invalid(format!(
                "Accel-Sim did not report launch {} ({}) in its own run: {} launches reported",
                p.launch,
                p.kernel,
                s.launches.len()
            )));
        };
        out.push((last, s));
    }
    Ok(out)
}

/// Runs `job`: writes `DIR/simulation.json` (whole or not at all) and returns it with a report.
pub fn gpu_simulate(job: &GpuSimulate) -> Result<GpuSimulation, GpuJobError> {
    // The folder's next state is built beside it and swapped in whole.
    let mut done = bbv_files::folder::update(&job.dir, |d| {
        let job = GpuSimulate {
            dir: d.to_path_buf(),
            ..job.clone()
        };
        simulate_staged(&job)
    })?;
    done.report = bbv_files::folder::plain(&done.report);
    Ok(done)
}

fn simulate_staged(job: &GpuSimulate) -> Result<GpuSimulation, GpuJobError> {
    let jobs = job
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 {
        return Err(invalid("--jobs must be at least 1".into()));
    }
    let picks = picks(&job.dir)?;
    let summary = read_json(&job.dir.join(bbv_rundir::files::SUMMARY))?;
    let trace = match (job.warmup_launches, summary["trace"].as_str()) {
        (0, _) => None,
        (_, Some(t)) => Some(KernelList::open(Path::new(t)).map_err(bbv_gpu::GpuError::from)?),
        (_, None) => {
            return Err(invalid(format!(
                "{}: names no trace list to take warming launches from (a live run's sample, or one from before bbv recorded it): give --warmup-launches 0 or sample the trace again",
                job.dir.join(bbv_rundir::files::SUMMARY).display()
            )))
        }
    };
    // A pick past the sampled list's end, or (the launches before a pick warm it) past the
    // trace's, is not of that list.
    let launches = match &trace {
        Some(t) => Some(t.kernels().count()),
        None => summary["intervals"].as_u64().map(|n| n as usize),
    };
    if let Some(n) = launches {
        if let Some(p) = picks.iter().find(|p| p.launch >= n) {
            return Err(invalid(format!(
                "{}: launch {} is past the end of {} ({n} launches): not a sample of that trace",
                job.dir.join(bbv_rundir::files::GPU_WEIGHTS).display(),
                p.launch,
                summary["trace"].as_str().unwrap_or("the sampled list")
            )));
        }
    }
    let sm = sm_of(&picks)?;
    let sim = Simulator::find(job.accelsim.as_deref())?;
    let config = sim.config(sm, job.config.as_deref())?;
    let full = match &job.full {
        Some(list) => Some(full_run(&sim, &config, list, &picks, &summary)?),
        None => None,
    };
    let results = simulate_picks(&sim, &config, &picks, trace.as_ref(), job, jobs)?;
    let setup = crate::gpu_simulate_doc::Setup {
        config: &config,
        warmup_launches: job.warmup_launches,
        jobs,
        full_list: job.full.as_deref(),
    };
    let (doc, view) =
        crate::gpu_simulate_doc::document(&setup, &picks_json(&picks), &results, full);
    let mut files = AtomicFiles::default();
    let json = doc.to_json();
    files.write(&job.dir.join(bbv_rundir::files::SIMULATION), |w| {
        writeln!(w, "{json:#}")
    })?;
    // The sample's page shows the figures in its #simulation section: both files change together.
    let page_path = job.dir.join(bbv_rundir::files::REPORT);
    if page_path.is_file() {
        let page = bbv_files::input::read_text(&page_path, 1 << 30)?;
        let section = bbv_report::gpu_simulation_section(&view);
        if let Some(page) = bbv_report::with_simulation(&page, &section) {
            files.write(&page_path, |w| w.write_all(page.as_bytes()))?;
        }
    }
    files.commit()?;
    Ok(GpuSimulation {
        report: crate::gpu_simulate_doc::report(&view),
        file: doc,
    })
}

/// (launch, kernel, weight) of each pick, for the document.
fn picks_json(picks: &[Pick]) -> Vec<(usize, String, f64)> {
    picks
        .iter()
        .map(|p| (p.launch, p.kernel.clone(), p.weight))
        .collect()
}

/// The whole list simulated at once; it must be the list that was sampled.
fn full_run(
    sim: &Simulator,
    config: &Config,
    list: &Path,
    picks: &[Pick],
    summary: &serde_json::Value,
) -> Result<Simulated, GpuJobError> {
    let kl = KernelList::open(list).map_err(bbv_gpu::GpuError::from)?;
    let n = kl.kernels().count();
    if summary["intervals"].as_u64() != Some(n as u64) {
        return Err(invalid(format!(
            "{}: {n} launches, but the sample was taken from {}: not the trace that was sampled",
            list.display(),
            summary["intervals"]
        )));
    }
    let s = sim.run(config, list)?;
    if s.launches.len() != n {
        return Err(invalid(format!(
            "Accel-Sim reported {} of the {n} launches of {}",
            s.launches.len(),
            list.display()
        )));
    }
    let mut by_uid = s.launches.clone();
    by_uid.sort_by_key(|l| l.uid);
    for p in picks {
        if by_uid[p.launch].kernel != p.kernel {
            return Err(invalid(format!(
                "{}: launch {} is {}, but the sample picked {} there: not the trace that was sampled",
                list.display(),
                p.launch,
                by_uid[p.launch].kernel,
                p.kernel
            )));
        }
    }
    Ok(s)
}
