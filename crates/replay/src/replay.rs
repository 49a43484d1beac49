//! `bbv replay`: runs the program again under QEMU watching only the markers of a run
//! directory, and checks that every region starts and ends where the profile says.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bbv_collect::GuestStatus;
use serde::Serialize;

use bbv_files::folder::Staged;
use bbv_files::AtomicFiles;
use bbv_pipeline::markers::Profile;
use bbv_pipeline::regions::region_id;
use bbv_rundir::{self as rundir, Marker, Summary};

use bbv_collect::Events;

use crate::ReplayError;

/// What `bbv replay` asks for.
#[derive(Clone, Debug)]
pub struct ReplayRequest {
    /// The run directory.
    pub dir: PathBuf,
    /// The program (must be the one profiled) and how it runs; what its launch leaves open
    /// is the run's own ([`on_run`]).
    pub guest: bbv_collect::Guest,
    /// Largest |deviation| accepted, in percent.
    pub tolerance_pct: f64,
    /// Also write ChampSim traces of the regions (`bbv trace`).
    pub trace: Option<crate::trace::TraceSpec>,
    /// Also write executable checkpoints of the regions (`bbv checkpoint`).
    pub checkpoint: Option<crate::checkpoint::CheckpointSpec>,
    /// Also simulate the regions with Sniper, live (`bbv simulate --simulator sniper`).
    pub sniper: Option<crate::sniper::SniperSpec>,
}

/// One region's check.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RegionCheck {
    /// Region id (cluster + 1).
    pub id: usize,
    /// The start marker was reached.
    pub start_found: bool,
    /// The end marker was reached.
    pub end_found: bool,
    /// Instructions between the markers in the profiling run.
    pub profile_length: u64,
    /// Instructions between them in the replay.
    pub replay_length: Option<u64>,
    /// 100 x (replay - profile) / profile.
    pub deviation_pct: Option<f64>,
    /// L1 distance (0..2) between the replayed region's vector and the chosen interval's,
    /// both normalised to sum 1, blocks matched by (image, offset).
    pub bbv_l1: Option<f64>,
    /// The warmup marker was reached (None: no warmup).
    pub warmup_found: Option<bool>,
}

/// The whole check (`replay.json`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReplayReport {
    /// Largest |deviation| accepted.
    pub tolerance_pct: f64,
    /// Per region.
    pub regions: Vec<RegionCheck>,
    /// Instructions of the replay's first thread.
    pub replay_instructions: u64,
    /// The profile's first thread.
    pub profile_instructions: u64,
    /// How the threads were scheduled, as in the run (`summary.json`'s `schedule`).
    pub schedule: String,
    /// What the replay's deterministic order could not follow (empty: it followed the run's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedule_events: Vec<String>,
    /// Said of a run whose several threads followed the host's schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_note: Option<String>,
}

impl ReplayReport {
    /// What `bbv replay --json` prints: the tolerance and the regions' checks.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "tolerance_pct": self.tolerance_pct,
            "regions": self.regions,
        })
    }

    /// Every marker reached.
    pub fn reached_all(&self) -> bool {
        (self.regions.iter()).all(|r| r.start_found && r.end_found && r.warmup_found != Some(false))
    }

    /// Every marker reached and every deviation within the tolerance.
    pub fn passed(&self) -> bool {
        self.reached_all()
            && (self.regions.iter()).all(|r| {
                r.deviation_pct
                    .is_some_and(|d| d.abs() <= self.tolerance_pct)
            })
    }

    /// The table `bbv replay` prints.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "region  start  end  warmup  profile length  replay length  deviation    bbv L1\n",
        );
        let yn = |b: bool| if b { "yes" } else { "NO" };
        for r in &self.regions {
            let _ = writeln!(
                s,
                "{:>6}  {:>5}  {:>3}  {:>6}  {:>14}  {:>13}  {:>9}  {:>8}",
                r.id,
                yn(r.start_found),
                yn(r.end_found),
                r.warmup_found.map_or("-", yn),
                r.profile_length,
                r.replay_length.map_or("-".into(), |n| n.to_string()),
                r.deviation_pct.map_or("-".into(), |d| format!("{d:+.4}%")),
                r.bbv_l1.map_or("-".into(), |d| format!("{d:.4}")),
            );
        }
        if let Some(note) = &self.schedule_note {
            let _ = writeln!(s, "schedule: {note}");
        }
        if let Some(first) = self.schedule_events.first() {
            let _ = writeln!(
                s,
                "schedule: {} event{} the deterministic order could not follow (replay.json), first: {first}",
                self.schedule_events.len(),
                if self.schedule_events.len() == 1 { "" } else { "s" },
            );
        }
        let _ = writeln!(
            s,
            "{} (tolerance {}%)",
            if self.passed() {
                "every marker reached, every length within the tolerance"
            } else {
                "FAILED: a marker was missed or a length is off"
            },
            self.tolerance_pct
        );
        s
    }
}

/// How the replayed guest ended, and the check.
pub struct ReplayOutcome {
    /// The guest's status.
    pub status: GuestStatus,
    /// The report, or why none could be made.
    pub report: Result<ReplayReport, ReplayError>,
    /// The traces, when asked for.
    pub traces: Option<Result<crate::trace::TraceReport, ReplayError>>,
    /// The checkpoints, when asked for.
    pub checkpoints: Option<Result<crate::checkpoint::CheckpointReport, ReplayError>>,
    /// Checkpoints were asked for (none are made of a replay that missed a marker).
    pub checkpoints_asked: bool,
    /// Sniper's figures, when asked for.
    pub sniper: Option<crate::sniper::SniperResults>,
}

/// (image file name, link-time offset): how blocks and markers are matched across runs.
pub(crate) type Key = (String, u64);

struct Plan {
    /// Distinct marker instructions: (image, offset, file offset).
    pcs: Vec<(String, u64, u64)>,
    /// (pc index, count, event).
    targets: Vec<(usize, u64, usize)>,
    /// The profiled program's image name and the one its replayed copy maps under, where a
    /// renamed copy (its build id checked) runs: the plugin finds images by name.
    renamed: Option<(String, String)>,
}

/// Checks the run directory against the program and builds the plugin's marker list.
/// Events: region r's start = 2r, end = 2r + 1, warmup = 2n + r.
fn plan(dir: &Path, s: &Summary, program: &Path) -> Result<Plan, ReplayError> {
    let want = s.program.build_id.as_deref();
    let have = bbv_collect::ElfFacts::read(program).and_then(|f| f.build_id);
    if have.as_deref() != want {
        return Err(ReplayError::Invalid(format!(
            "{}: build id {} differs from the profiled program's {} ({}): not the program of this run",
            program.display(),
            have.as_deref().unwrap_or("(none)"),
            want.unwrap_or("(none)"),
            dir.join(bbv_rundir::files::SUMMARY).display()
        )));
    }
    let images = rundir::read_images(&dir.join(bbv_rundir::files::IMAGES))?;
    let file_name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let renamed = file_name(Path::new(&s.program.path))
        .zip(file_name(program))
        .filter(|(was, now)| was != now);
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut p = Plan {
        pcs: Vec::new(),
        targets: Vec::new(),
        renamed: renamed.clone(),
    };
    let n = s.points.len();
    let mut add = |m: &Marker, event: usize| -> Result<(), ReplayError> {
        let off = m.offset_value()?;
        let key = (m.image.clone(), off);
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                let image = images.iter().find(|i| i.name == m.image).ok_or_else(|| {
                    ReplayError::Invalid(format!(
                        "marker image {} is not in {}",
                        m.image,
                        dir.join(bbv_rundir::files::IMAGES).display()
                    ))
                })?;
                let now = renamed
                    .as_ref()
                    .filter(|(was, _)| *was == m.image)
                    .map(|r| &r.1);
                let path = if now.is_some() {
                    program
                } else {
                    image.path.as_path()
                };
                let facts = bbv_collect::ElfFacts::read(path).unwrap_or_default();
                let id = facts.build_id.clone();
                if id != image.build_id {
                    return Err(ReplayError::Invalid(format!(
                        "{}: build id {} differs from the profiled one {}: the library changed since the run",
                        path.display(),
                        id.as_deref().unwrap_or("(none)"),
                        image.build_id.as_deref().unwrap_or("(none)")
                    )));
                }
                let file_off = facts.file_offset(off).ok_or_else(|| {
                    ReplayError::Invalid(format!(
                        "marker {}+{}: not an address in {}",
                        m.image,
                        m.offset,
                        path.display()
                    ))
                })?;
                p.pcs.push((now.unwrap_or(&m.image).clone(), off, file_off));
                index.insert(key, p.pcs.len() - 1);
                p.pcs.len() - 1
            }
        };
        if m.count == 0 {
            return Err(ReplayError::Invalid(format!(
                "marker {}+{}: count 0 (counts start at 1)",
                m.image, m.offset
            )));
        }
        p.targets.push((i, m.count, event));
        Ok(())
    };
    for (r, pt) in s.points.iter().enumerate() {
        add(&pt.start, 2 * r)?;
        add(&pt.end, 2 * r + 1)?;
        if let Some(w) = &pt.warmup {
            add(w, 2 * n + r)?;
        }
    }
    Ok(p)
}

fn write_markers(path: &Path, p: &Plan, global: bool) -> Result<(), ReplayError> {
    let mut text = String::new();
    if global {
        text.push_str("global\n");
    }
    for (i, (image, _, file_off)) in p.pcs.iter().enumerate() {
        let _ = writeln!(text, "pc {i} {file_off:x} {image}");
    }
    for (i, count, event) in &p.targets {
        let _ = writeln!(text, "target {i} {count} {event}");
    }
    std::fs::write(path, text).map_err(|e| ReplayError::io(path, e))
}

/// Event -> (position, cumulative instructions per replay block id).
/// L1 distance between two vectors normalised to sum 1.
pub(crate) fn l1(a: &HashMap<Key, u64>, b: &HashMap<Key, u64>) -> f64 {
    let (sa, sb) = (
        a.values().sum::<u64>() as f64,
        b.values().sum::<u64>() as f64,
    );
    if sa == 0.0 || sb == 0.0 {
        return 2.0;
    }
    // Summed in key order: a HashMap's order changes from run to run, and with it the last
    // bits of the sum (replay.json must be the same bytes for the same run).
    let mut keys: Vec<&Key> = a
        .keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .collect();
    keys.sort_unstable();
    let get = |m: &HashMap<Key, u64>, k: &Key| m.get(k).copied().unwrap_or(0) as f64;
    keys.iter()
        .map(|k| (get(a, k) / sa - get(b, k) / sb).abs())
        .sum()
}

/// The profiled vectors of the points' intervals (or slices), to compare the replay's with.
pub(crate) fn points_profile(
    dir: &Path,
    s: &Summary,
    n_blocks: usize,
) -> Result<Profile, ReplayError> {
    let keep: BTreeSet<u64> = s.points.iter().map(|p| p.interval).collect();
    Ok(if s.regions_mode == rundir::Regions::Looppoint {
        // The slices' vectors merged over threads: threads share work differently on replay.
        let none = BTreeSet::new();
        let kept = bbv_pipeline::looppoint::read_global(dir, n_blocks, &none, &keep, None)?.kept;
        let mut p = Profile::default();
        p.kept = kept;
        p
    } else {
        Profile::read(
            &dir.join(bbv_rundir::files::BB),
            n_blocks,
            &BTreeSet::new(),
            &keep,
        )?
    })
}

/// `guest` as it runs again on a run directory: what its launch leaves open is what the run
/// was profiled with (its QEMU while it exists, its CPU model, its sysroot), so that every
/// command on a run directory runs the program as the profile did.
pub fn on_run(guest: &bbv_collect::Guest, s: &Summary) -> bbv_collect::Guest {
    let l = &guest.launch;
    bbv_collect::Guest {
        launch: bbv_collect::Launch {
            qemu: s.qemu_or(l.qemu.as_deref()),
            plugin: l.plugin.clone(),
            cpu: l.cpu.clone().or_else(|| s.cpu.clone()),
            sysroot: l
                .sysroot
                .clone()
                .or_else(|| s.sysroot.as_ref().map(PathBuf::from)),
        },
        ..guest.clone()
    }
}

/// A tolerance is a percentage of 0 or more (a NaN would pass every deviation).
pub(crate) fn check_tolerance(pct: f64) -> Result<(), ReplayError> {
    match pct.is_finite() && pct >= 0.0 {
        true => Ok(()),
        false => Err(ReplayError::Invalid(format!(
            "--tolerance {pct}: expected a percentage of 0 or more"
        ))),
    }
}

/// Runs the replay. `Err` = bad input, found before anything ran.
pub fn replay(req: &ReplayRequest) -> Result<ReplayOutcome, ReplayError> {
    check_tolerance(req.tolerance_pct)?;
    // Every folder written is staged and swapped in only if all of it was made: the run
    // directory (replay.json, trace.json) last, after the traces' or checkpoints' own folder.
    let run = rundir::stage(&req.dir)?;
    let mut others = Vec::new();
    let mut stage = |dir: &Path| -> Result<PathBuf, ReplayError> {
        if let Some(inside) = run.within(dir) {
            return Ok(inside);
        }
        let s = Staged::open(dir)?;
        let p = s.path().to_path_buf();
        others.push(s);
        Ok(p)
    };
    let mut staged = req.clone();
    staged.dir = run.path().to_path_buf();
    if let Some(t) = staged.trace.as_mut() {
        t.dir = stage(&t.dir)?;
    }
    if let Some(c) = staged.checkpoint.as_mut() {
        c.dir = stage(&c.dir)?;
    }
    let outcome = replay_staged(&staged)?;
    let made = outcome.report.is_ok()
        && !matches!(outcome.traces, Some(Err(_)))
        && !matches!(outcome.checkpoints, Some(Err(_)));
    if made {
        for s in others {
            s.commit()?;
        }
        run.commit()?;
    }
    Ok(outcome)
}

fn replay_staged(req: &ReplayRequest) -> Result<ReplayOutcome, ReplayError> {
    let s = rundir::read_summary(&req.dir)?;
    if s.points.is_empty() {
        return Err(ReplayError::Invalid(format!(
            "{}: the run has no regions to replay (summary.json lists no points)",
            req.dir.display()
        )));
    }
    if let Some(spec) = &req.trace {
        spec.check_run(&req.dir, &s)?;
    }
    let program = bbv_collect::resolve_program(&req.guest.program)?;
    let plan = plan(&req.dir, &s, &program)?;
    let blocks = rundir::read_blocks(&req.dir.join(bbv_rundir::files::BLOCKS))?;
    let looppoint = s.regions_mode == rundir::Regions::Looppoint;
    let profile = points_profile(&req.dir, &s, blocks.len())?;
    let (work, _cleanup) = bbv_files::interrupt::Cleanup::create(|| {
        bbv_files::interrupt::remove_orphans(&std::env::temp_dir(), ".bbv-replay-");
        let prefix = bbv_files::interrupt::tagged(".bbv-replay-");
        let d = tempfile::Builder::new().prefix(&prefix).tempdir()?;
        let path = d.path().to_path_buf();
        Ok((d, path))
    })
    .map_err(|e| ReplayError::io(std::env::temp_dir(), e))?;
    let markers = work.path().join("markers");
    write_markers(&markers, &plan, looppoint)?;
    let (tracing, simulating) = streams(req, &s, &program, work.path())?;
    let checkpointing = match &req.checkpoint {
        Some(spec) => Some(crate::checkpoint::Checkpointing::start(
            spec,
            &s,
            work.path(),
        )?),
        None => None,
    };
    let request = bbv_collect::Request {
        guest: on_run(&req.guest, &s),
        counting: bbv_collect::PluginConfig {
            // One interval that never closes: the counts are cumulative.
            interval: u64::MAX / 4,
            count_only: true,
            rep_iterations: s.count_rep == "iteration",
            exclude: if looppoint || s.turn_quantum > 0 {
                s.exclude.clone()
            } else {
                Vec::new()
            },
            flow: if looppoint { s.flow_quantum } else { 0 },
            turns: s.turn_quantum,
            markers: Some(markers),
            trace: (tracing.as_ref().map(|t| t.file.clone()))
                .or_else(|| simulating.as_ref().map(|x| x.file.clone())),
            checkpoint: checkpointing.as_ref().map(|c| c.file.clone()),
            // Each region's calls, for `--check` to compare a checkpoint's with.
            syscalls: checkpointing.is_some(),
            ..Default::default()
        },
        work_dir: work.path().to_path_buf(),
    };
    let prepared = bbv_collect::prepare(request)?;
    if checkpointing.is_some() {
        crate::checkpoint::same_qemu(&prepared, &s)?;
    }
    let outcome = prepared.run()?;
    // QEMU gone before the plugin's results, or killed outright (SIGKILL: its exit path, which
    // ends every thread's stream, never ran): Sniper may wait for a stream that never opens,
    // or a simulated thread for a wake that never comes, so it is stopped, not waited for.
    let replay_failed = outcome.collected.is_err()
        || outcome.status == bbv_collect::GuestStatus::Signaled(libc::SIGKILL);
    let mut events_seen: Option<Events> = None;
    let mut checkpoints = None;
    let report = outcome.collected.map_err(ReplayError::from).and_then(|c| {
        let events = c.events()?;
        let report = replay_report(req, &s, &blocks, &profile, &c, (&events, &plan))?;
        // Checkpoints only of a replay that reached every marker.
        if let Some(ck) = checkpointing.filter(|_| report.reached_all()) {
            let plan = crate::checkpoint::MarkerPlan {
                pcs: plan.pcs.iter().map(|p| (p.0.as_str(), p.1)).collect(),
                targets: &plan.targets,
            };
            checkpoints = Some(ck.finish(&req.dir, &s, &plan, &c, &events));
        }
        events_seen = Some(events);
        Ok(report)
    });
    let traces = tracing.map(|t| t.finish(&req.dir, &s, events_seen.as_ref()));
    Ok(ReplayOutcome {
        status: outcome.status,
        report,
        traces,
        checkpoints,
        checkpoints_asked: req.checkpoint.is_some(),
        sniper: simulating.map(|sim| match replay_failed {
            true => sim.abort(),
            false => sim.finish(),
        }),
    })
}

/// The replay's ChampSim traces or its Sniper simulations, when asked for (one or the other).
fn streams(
    req: &ReplayRequest,
    s: &Summary,
    program: &Path,
    work: &Path,
) -> Result<
    (
        Option<crate::trace::Tracing>,
        Option<crate::sniper::Simulating>,
    ),
    ReplayError,
> {
    match (&req.trace, &req.sniper) {
        (Some(_), Some(_)) => Err(ReplayError::Invalid(
            "one replay either traces for ChampSim or streams to Sniper".into(),
        )),
        (Some(spec), None) => Ok((Some(crate::trace::Tracing::start(spec, s, work)?), None)),
        (None, Some(spec)) => {
            let isa = bbv_collect::isa_of_elf(program)?;
            let sim = crate::sniper::Simulating::start(spec, s, isa, work)?;
            Ok((None, Some(sim)))
        }
        (None, None) => Ok((None, None)),
    }
}

/// The replay's check from what it collected, written to `DIR/replay.json`.
fn replay_report(
    req: &ReplayRequest,
    s: &Summary,
    blocks: &[rundir::BlockRow],
    profile: &Profile,
    c: &bbv_collect::Collected,
    (events, plan): (&Events, &Plan),
) -> Result<ReplayReport, ReplayError> {
    let looppoint = s.regions_mode == rundir::Regions::Looppoint;
    if s.turn_quantum > 0 && c.threads.len() != s.threads.len() {
        return Err(ReplayError::Invalid(format!(
            "the run took deterministic turns among {} threads, this replay ran {}: the order cannot be reproduced (another thread count, OMP_NUM_THREADS?)",
            s.threads.len(),
            c.threads.len()
        )));
    }
    // A renamed copy of the program: its blocks are the profiled program's.
    let key_of_replay: Vec<Option<Key>> = c
        .blocks
        .iter()
        .map(|b| {
            b.image.map(|i| match (c.images[i].name(), &plan.renamed) {
                (name, Some((was, now))) if name == *now => (was.clone(), b.address),
                (name, _) => (name, b.address),
            })
        })
        .collect();
    // Looppoint lengths count the instructions outside the excluded images.
    let counted: Option<Vec<bool>> = looppoint.then(|| {
        key_of_replay
            .iter()
            .map(|k| {
                k.as_ref()
                    .is_none_or(|(image, _)| !bbv_profile::image_matches(image, &s.exclude))
            })
            .collect()
    });
    let key_of_profile: Vec<Option<Key>> = blocks
        .iter()
        .map(|b| b.image.clone().map(|i| (i, b.offset)))
        .collect();
    let mut report = check(
        s,
        req.tolerance_pct,
        events,
        profile,
        &Keys {
            profile: &key_of_profile,
            replay: &key_of_replay,
            counted: counted.as_deref(),
        },
        if looppoint {
            c.threads.iter().map(|t| t.instructions).sum()
        } else {
            c.threads.first().map_or(0, |t| t.instructions)
        },
    );
    report.schedule_events = c.schedule_events()?;
    let mut files = AtomicFiles::default();
    files.write(&req.dir.join(bbv_rundir::files::REPLAY), |w| {
        serde_json::to_writer_pretty(&mut *w, &report)?;
        std::io::Write::write_all(w, b"\n")
    })?;
    files.commit()?;
    Ok(report)
}

pub(crate) fn keyed(pairs: &[(u32, u64)], keys: &[Option<Key>]) -> HashMap<Key, u64> {
    let mut out = HashMap::new();
    for &(id, n) in pairs {
        let key = keys
            .get((id as usize).wrapping_sub(1))
            .cloned()
            .flatten()
            .unwrap_or_else(|| (format!("anonymous block {id}"), 0));
        *out.entry(key).or_default() += n;
    }
    out
}

/// How blocks of the two runs are matched, and which replay blocks count toward lengths.
struct Keys<'a> {
    /// By profile block id - 1.
    profile: &'a [Option<Key>],
    /// By replay block id - 1.
    replay: &'a [Option<Key>],
    /// Looppoint runs: whether each replay block counts (not in an excluded image).
    counted: Option<&'a [bool]>,
}

/// Instructions of the blocks that count (`counted`, by replay id - 1) run between two events'
/// snapshots, over every thread.
pub(crate) fn filtered_between(
    a: &(u64, Vec<(u32, u64)>),
    b: &(u64, Vec<(u32, u64)>),
    counted: &[bool],
) -> u64 {
    let before: HashMap<u32, u64> = a.1.iter().copied().collect();
    b.1.iter()
        .filter(|(id, _)| is_counted(counted, *id))
        .map(|&(id, c)| c.saturating_sub(before.get(&id).copied().unwrap_or(0)))
        .sum()
}

/// Whether block `id` (1-based) counts toward looppoint lengths: it lies outside the excluded
/// images (a block the replay's table does not know counts).
fn is_counted(counted: &[bool], id: u32) -> bool {
    counted
        .get((id as usize).wrapping_sub(1))
        .copied()
        .unwrap_or(true)
}

fn check(
    s: &Summary,
    tolerance_pct: f64,
    events: &Events,
    profile: &Profile,
    keys: &Keys,
    replay_instructions: u64,
) -> ReplayReport {
    let Keys {
        profile: key_of_profile,
        replay: key_of_replay,
        counted,
    } = *keys;
    let n = s.points.len();
    let regions = s
        .points
        .iter()
        .enumerate()
        .map(|(r, p)| {
            let (start, end) = (events.get(&(2 * r)), events.get(&(2 * r + 1)));
            let replay_length = match (start, end, counted) {
                (Some(a), Some(b), Some(counted)) => Some(filtered_between(a, b, counted)),
                (Some(a), Some(b), None) if b.0 >= a.0 => Some(b.0 - a.0),
                _ => None,
            };
            let deviation_pct = replay_length
                .map(|l| 100.0 * (l as f64 - p.length as f64) / p.length.max(1) as f64);
            let bbv_l1 = match (start, end, profile.kept.get(&p.interval)) {
                (Some(a), Some(b), Some(v)) => {
                    // A region from the program's start has its start marker at the first
                    // block of the program's own code, but its profiled vector counts from
                    // the first instruction (the dynamic loader's work too): so does this one.
                    let before: HashMap<u32, u64> = if p.start_instruction == 0 {
                        HashMap::new()
                    } else {
                        a.1.iter().copied().collect()
                    };
                    // Slices leave the excluded libraries out (a runtime spinning at a
                    // barrier): the replay's vector does too, like for like.
                    let kept = |id: u32| counted.is_none_or(|c| is_counted(c, id));
                    let diff: Vec<(u32, u64)> =
                        b.1.iter()
                            .map(|&(id, c)| (id, c - before.get(&id).copied().unwrap_or(0).min(c)))
                            .filter(|x| x.1 > 0 && kept(x.0))
                            .collect();
                    Some(l1(&keyed(&diff, key_of_replay), &keyed(v, key_of_profile)))
                }
                _ => None,
            };
            RegionCheck {
                id: region_id(p),
                start_found: start.is_some(),
                end_found: end.is_some(),
                profile_length: p.length,
                replay_length,
                deviation_pct,
                bbv_l1,
                warmup_found: p.warmup.as_ref().map(|_| events.contains_key(&(2 * n + r))),
            }
        })
        .collect();
    ReplayReport {
        tolerance_pct,
        regions,
        replay_instructions,
        profile_instructions: if s.regions_mode == rundir::Regions::Looppoint {
            s.instructions
        } else {
            s.threads.first().map_or(0, |t| t.instructions)
        },
        schedule: s.schedule.clone(),
        schedule_events: Vec::new(),
        schedule_note: (s.schedule == "host" && s.threads.len() > 1).then(|| {
            "the run's threads followed the host's schedule, so replayed lengths can drift (bbv run --schedule deterministic, QEMU 9.1 or later, replays exactly)".to_string()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real run's summary (the study's xz run, kept in the repository).
    fn summary() -> Summary {
        let text = include_str!("../../../tools/champsim/study/xz6-2m/summary.json");
        serde_json::from_str(text).unwrap()
    }

    /// What the launch leaves open is the run's: its CPU model and sysroot, and its QEMU while
    /// that file exists; what the user gave wins.
    #[test]
    fn a_guest_on_a_run_takes_the_runs_launch() {
        let mut s = summary();
        let guest = bbv_collect::Guest {
            program: "xz".into(),
            args: vec!["-6".into()],
            launch: bbv_collect::Launch::default(),
        };
        assert_eq!(
            on_run(&guest, &s),
            guest,
            "nothing recorded, nothing filled in"
        );
        let t = tempfile::tempdir().unwrap();
        let qemu = t.path().join("qemu-x86_64");
        std::fs::write(&qemu, "").unwrap();
        s.qemu_path = Some(qemu.display().to_string());
        s.cpu = Some("Haswell".into());
        s.sysroot = Some("/usr/x86_64-linux-gnu".into());
        let g = on_run(&guest, &s);
        assert_eq!(g.launch.qemu.as_deref(), Some(qemu.as_path()));
        assert_eq!(g.launch.cpu.as_deref(), Some("Haswell"));
        assert_eq!(
            g.launch.sysroot,
            Some(PathBuf::from("/usr/x86_64-linux-gnu"))
        );
        assert_eq!((g.program.as_str(), g.args.len()), ("xz", 1));
        let mine = bbv_collect::Guest {
            launch: bbv_collect::Launch {
                qemu: Some("/opt/q".into()),
                plugin: Some("/opt/p.so".into()),
                cpu: Some("qemu64".into()),
                sysroot: Some("/r".into()),
            },
            ..guest.clone()
        };
        assert_eq!(on_run(&mine, &s), mine, "what the user gave wins");
        // A QEMU since removed is not insisted on: the one on PATH is looked up instead.
        std::fs::remove_file(&qemu).unwrap();
        assert_eq!(on_run(&guest, &s).launch.qemu, None);
    }

    #[test]
    fn l1_of_normalised_vectors() {
        let k = |s: &str| (s.to_string(), 0u64);
        let a: HashMap<Key, u64> = [(k("x"), 10), (k("y"), 30)].into();
        let b: HashMap<Key, u64> = [(k("x"), 1), (k("y"), 3)].into();
        assert!(l1(&a, &b) < 1e-12, "same shares");
        let c: HashMap<Key, u64> = [(k("z"), 5)].into();
        assert!((l1(&a, &c) - 2.0).abs() < 1e-12, "disjoint");
        let d: HashMap<Key, u64> = [(k("x"), 20), (k("y"), 20)].into();
        assert!((l1(&a, &d) - 0.5).abs() < 1e-12);
    }
}
