//! `bbv checkpoint`: a replay that captures the process at each region's warmup start (or
//! start) and turns every capture into a static ELF that starts there and stops at the
//! region's end ([`bbv_checkpoint`]). The ELFs and `checkpoints.json` appear only when every
//! region was captured and built.

use std::path::{Path, PathBuf};

use bbv_files::AtomicFiles;
use bbv_plugin_contract::checkpoint::Capture;
use bbv_plugin_contract::files;
use serde::{Deserialize, Serialize};

use crate::checkpoint_calls::unreproducible;
use crate::ReplayError;
use bbv_pipeline::regions::region_id;
use bbv_rundir::Summary;

/// What `bbv checkpoint` asks for besides the replay.
#[derive(Clone, Debug)]
pub struct CheckpointSpec {
    /// The checkpoints' folder.
    pub dir: PathBuf,
    /// Start at each region's warmup (false: at the region itself, `--no-warmup`).
    pub warmup: bool,
    /// CPU seconds after which a checkpoint stops itself (a region gone off course).
    pub cpu_seconds: u64,
}

/// A marker as counted from a checkpoint's start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CountedMarker {
    /// The image's file name.
    pub image: String,
    /// The instruction's offset in it (link-time address).
    pub offset: String,
    /// Its guest address in the checkpoint.
    pub address: String,
    /// Where that address lies in the checkpoint's file (how QEMU's plugin names it there).
    pub file_offset: String,
    /// Executions from the checkpoint's first instruction, that one included.
    pub count: u64,
}

/// The command lines that run a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Commands {
    /// Natively (exit 0 at the region's end).
    pub native: String,
    /// Under QEMU user mode.
    pub qemu: String,
    /// In gem5's syscall-emulation mode (documented, not tested).
    pub gem5: String,
}

impl Commands {
    fn of(elf: &str, cpu: Option<&str>) -> Commands {
        Commands {
            native: elf.to_string(),
            qemu: match cpu {
                Some(cpu) => format!("qemu-x86_64 -cpu {cpu} {elf}"),
                None => format!("qemu-x86_64 {elf}"),
            },
            gem5: format!("gem5.opt configs/deprecated/example/se.py --cmd={elf}"),
        }
    }
}

/// One region's checkpoint (`checkpoints.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RegionCheckpoint {
    /// Region id (cluster + 1).
    pub id: usize,
    /// SimPoint's cluster.
    pub cluster: usize,
    /// SimPoint's weight.
    pub weight: f64,
    /// Instructions of the cluster's intervals over the region's.
    pub multiplier: f64,
    /// The ELF's file name in the checkpoints' folder.
    pub file: String,
    /// Where it starts: the warmup's marker (or the region's), count 1.
    pub start: CountedMarker,
    /// Where the region starts (after the warmup).
    pub region_start: CountedMarker,
    /// Where it stops: the region's end marker.
    pub end: CountedMarker,
    /// Instructions before the region (0 with `--no-warmup`).
    pub warmup_instructions: u64,
    /// Instructions of the region, as profiled.
    pub region_instructions: u64,
    /// Instructions of the profiled run before the checkpoint's start.
    pub start_instruction: u64,
    /// Bytes of memory the checkpoint maps from its file (zero pages are left out).
    pub memory_bytes: u64,
    /// The ELF's size.
    pub file_bytes: u64,
    /// Its FNV-1a fingerprint (`--check` refuses a file that changed).
    pub fingerprint: String,
    /// The restorer's segment and the moved end instruction's page, [start, end) each: code
    /// there is the checkpoint's own.
    pub restorer: Vec<[String; 2]>,
    /// What it cannot restore as it was (descriptors left closed, ...).
    pub notes: Vec<String>,
    /// System calls from the checkpoint's start to the region's end in the replay (listed in
    /// `region-R.syscalls`, which `--check` compares the checkpoint's with).
    #[serde(default)]
    pub syscalls: u64,
    /// How to run it.
    pub commands: Commands,
}

/// Every checkpoint (`checkpoints.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckpointReport {
    /// The checkpoints' folder.
    pub dir: PathBuf,
    /// The run directory the regions are of, where it was when checkpointed.
    pub run: PathBuf,
    /// That run's identity by content ([`bbv_rundir::Summary::identity`]): what `--check`
    /// matches, so that a moved run is found beside its checkpoints and a rewritten one is
    /// told apart (absent in the indexes of older bbv versions).
    #[serde(default)]
    pub run_id: Option<String>,
    /// The profiled program's build id.
    pub build_id: Option<String>,
    /// The QEMU the run was profiled and checkpointed with.
    pub qemu: String,
    /// CPU seconds after which a checkpoint stops itself.
    pub cpu_seconds: u64,
    /// Per region, in the run's order.
    pub regions: Vec<RegionCheckpoint>,
}

impl CheckpointReport {
    /// What `bbv checkpoint` prints: each region's file, sizes and notes.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut t = String::new();
        for r in &self.regions {
            let _ = writeln!(
                t,
                "region {}: {} ({} MB of memory, {} MB file; {} system calls to its end)",
                r.id,
                r.file,
                r.memory_bytes >> 20,
                r.file_bytes >> 20,
                r.syscalls
            );
            for n in &r.notes {
                let _ = writeln!(t, "  note: {n}");
            }
        }
        let _ = writeln!(
            t,
            "{} checkpoints in {} (checkpoints.json: how to run each)",
            self.regions.len(),
            self.dir.display()
        );
        t
    }
}

/// A checkpointing replay under way: the capture list the plugin reads, and the folder inside
/// the checkpoints' where it writes the memory files that become the checkpoints (removed,
/// with the checkpoints' folder if this made it, unless [`Checkpointing::finish`] succeeds).
pub struct Checkpointing {
    spec: CheckpointSpec,
    /// The plugin's `checkpoint=FILE`.
    pub file: PathBuf,
    /// Per region: the event that captures it.
    events: Vec<usize>,
    /// Where the plugin writes the memory files (dropped before `fresh` is acted on).
    staging: Option<(tempfile::TempDir, bbv_files::interrupt::Cleanup)>,
    /// The checkpoints' folder did not exist before.
    fresh: bool,
    finished: bool,
}

impl Drop for Checkpointing {
    fn drop(&mut self) {
        self.staging = None;
        if self.fresh && !self.finished {
            // Nothing of a failed command stays behind, not even its folder (only if empty).
            let _ = std::fs::remove_dir(&self.spec.dir);
        }
    }
}

/// The marker instructions and events of a replay, as it numbered them.
pub struct MarkerPlan<'a> {
    /// Per marker index: (image, link-time offset).
    pub pcs: Vec<(&'a str, u64)>,
    /// (marker index, count, event).
    pub targets: &'a [(usize, u64, usize)],
}

impl Checkpointing {
    /// Writes the capture list into `work` and makes the folder for the memory files.
    pub fn start(
        spec: &CheckpointSpec,
        s: &Summary,
        work: &Path,
    ) -> Result<Checkpointing, ReplayError> {
        if s.regions_mode == bbv_rundir::Regions::Looppoint {
            return Err(ReplayError::Invalid(
                "the regions are LoopPoint slices of several threads: a checkpoint restores one \
                 thread (every thread's registers, its TLS and the futexes between them would be \
                 needed; docs/checkpoint.md); profile with --regions intervals"
                    .into(),
            ));
        }
        let n = s.points.len();
        let events: Vec<usize> = (0..n)
            .map(|r| match (&s.points[r].warmup, spec.warmup) {
                (Some(_), true) => 2 * n + r,
                _ => 2 * r,
            })
            .collect();
        let dir = &spec.dir;
        let mut ck = Checkpointing {
            spec: spec.clone(),
            file: work.join("captures"),
            events,
            staging: None,
            fresh: !dir.exists(),
            finished: false,
        };
        std::fs::create_dir_all(dir).map_err(|e| ReplayError::io(dir, e))?;
        // In the checkpoints' folder, so that each memory file is renamed into place.
        bbv_files::interrupt::remove_orphans(dir, STAGING);
        let (staging, cleanup) = bbv_files::interrupt::Cleanup::create(|| {
            let prefix = bbv_files::interrupt::tagged(STAGING);
            let d = tempfile::Builder::new().prefix(&prefix).tempdir_in(dir)?;
            let path = d.path().to_path_buf();
            Ok((d, path))
        })
        .map_err(|e| ReplayError::io(dir, e))?;
        // The first of a region's warmup and start markers captures it (its warmup may start
        // at the program's entry, after a region that begins in the loader's work).
        let mut text = format!("memory {}\n", staging.path().display());
        for (r, &e) in ck.events.iter().enumerate() {
            text += &match e == 2 * r {
                true => format!("capture {e}\n"),
                false => format!("capture {e} {}\n", 2 * r),
            };
        }
        ck.staging = Some((staging, cleanup));
        std::fs::write(&ck.file, text).map_err(|e| ReplayError::io(&ck.file, e))?;
        Ok(ck)
    }

    /// Builds every region's checkpoint from what the replay `c` collected (its `events`
    /// already read), all or none.
    pub fn finish(
        mut self,
        run: &Path,
        s: &Summary,
        plan: &MarkerPlan,
        c: &bbv_collect::Collected,
        events: &bbv_collect::Events,
    ) -> Result<CheckpointReport, ReplayError> {
        let built = self.build_all(run, s, plan, c, events);
        self.finished = built.is_ok();
        built
    }

    fn build_all(
        &self,
        run: &Path,
        s: &Summary,
        plan: &MarkerPlan,
        c: &bbv_collect::Collected,
        events: &bbv_collect::Events,
    ) -> Result<CheckpointReport, ReplayError> {
        let addresses = marker_addresses(&c.checkpoint_markers())?;
        let dir = &self.spec.dir;
        let dir = std::fs::canonicalize(dir).map_err(|e| ReplayError::io(dir, e))?;
        let staging = &self.staging.as_ref().expect("made at the start").0;
        let calls = crate::checkpoint_calls::replay_windows(&self.events, s, &c.syscalls())?;
        let at = Where {
            calls: &calls,
            s,
            plan,
            events,
            addresses: &addresses,
            collected: c,
            staging: staging.path(),
            dir: &dir,
        };
        let mut files = AtomicFiles::default();
        let mut regions = Vec::new();
        for (built, window) in self.build_regions(&at).into_iter().zip(&calls) {
            let Built {
                region,
                memory,
                open,
            } = built?;
            files.adopt(&memory, &dir.join(&region.file))?;
            files.write(&dir.join(calls_file(region.id)), |w| {
                crate::checkpoint_calls::write(window, &open, w)
            })?;
            regions.push(region);
        }
        let run = std::path::absolute(run).map_err(|e| ReplayError::io(run, e))?;
        let report = CheckpointReport {
            dir: bbv_files::folder::plain_path(&dir),
            run: bbv_files::folder::plain_path(&run),
            run_id: Some(s.identity()),
            build_id: s.program.build_id.clone(),
            qemu: s.qemu.clone(),
            cpu_seconds: self.spec.cpu_seconds,
            regions,
        };
        files.write(&dir.join(bbv_rundir::files::CHECKPOINTS_JSON), |w| {
            serde_json::to_writer_pretty(&mut *w, &report)?;
            std::io::Write::write_all(w, b"\n")
        })?;
        files.write(&dir.join(BLOCKS), |w| write_blocks(c, w))?;
        files.commit()?;
        for r in &report.regions {
            let out = dir.join(format!("region-{}.files", r.id));
            std::fs::create_dir_all(&out).map_err(|e| ReplayError::io(&out, e))?;
        }
        remove_stale(&dir, &report)?;
        Ok(report)
    }

    /// Every region's checkpoint, built side by side (each is its own file), in order.
    fn build_regions(&self, at: &Where) -> Vec<Result<Built, ReplayError>> {
        let n = at.s.points.len();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let workers = std::thread::available_parallelism().map_or(1, |p| p.get().min(n));
        let mut done: Vec<(usize, _)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let r = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if r >= n {
                                return mine;
                            }
                            mine.push((r, self.region(r, at)));
                        }
                    })
                })
                .collect();
            (handles.into_iter())
                .flat_map(|h| h.join().expect("a checkpoint's builder panicked"))
                .collect()
        });
        done.sort_by_key(|d| d.0);
        done.into_iter().map(|d| d.1).collect()
    }

    /// Builds region `r`'s checkpoint from its memory file, which becomes it.
    fn region(&self, r: usize, at: &Where) -> Result<Built, ReplayError> {
        let (s, p) = (at.s, &at.s.points[r]);
        let event = self.events[r];
        let id = region_id(p);
        let Some(captured) = at.collected.capture(event as u32) else {
            return Err(ReplayError::Invalid(format!(
                "region {id}: the process was not captured (its {} marker was not reached)",
                if event >= 2 * s.points.len() {
                    "warmup"
                } else {
                    "start"
                }
            )));
        };
        let capture =
            Capture::read(&captured.state).map_err(|e| ReplayError::Invalid(e.to_string()))?;
        // Marker m's executions from the checkpoint's start, of `total` over the run.
        let before = |m: usize| {
            (capture.hits.iter())
                .find(|h| h.0 as usize == m)
                .map_or(0, |h| h.1)
        };
        let (rs_marker, rs_total) = at.marker_of(2 * r)?;
        // Captured at the warmup's marker, or at the region's when that ran first.
        let start_marker = match before(rs_marker) + 1 == rs_total
            && at.addresses.get(&rs_marker) == Some(&capture.pc)
        {
            true => rs_marker,
            false => at.marker_of(event)?.0,
        };
        let (end_marker, end_total) = at.marker_of(2 * r + 1)?;
        let address = |m: usize| {
            at.addresses.get(&m).copied().ok_or_else(|| {
                ReplayError::Invalid(format!("region {id}: a marker of it was never reached"))
            })
        };
        let end_pc = address(end_marker)?;
        // Made once every checkpoint is in place.
        // Where the checkpoint writes when run: the folder's own name, not its stage's.
        let outputs = bbv_files::folder::plain_path(&at.dir.join(format!("region-{id}.files")));
        let copied = |fd: i32| captured.copied(fd);
        let memory = at.staging.join(files::checkpoint_memory(event as u32));
        let inputs = bbv_checkpoint::Inputs {
            capture: &capture,
            memory: &memory,
            copied: &copied,
            stdin_stream: captured.stdin.as_deref(),
            end_pc,
            end_count: end_total.saturating_sub(before(end_marker)),
            outputs: &outputs,
            cpu_seconds: self.spec.cpu_seconds,
        };
        let name = format!("region-{id}.elf");
        let path = at.dir.join(&name);
        let (built, file_bytes) = build_file(&inputs, id)?;
        let marker = |m: usize, count: u64, address: u64| CountedMarker {
            image: at.plan.pcs[m].0.to_string(),
            offset: format!("{:#x}", at.plan.pcs[m].1),
            address: format!("{address:#x}"),
            file_offset: format!("{:#x}", built.file_offset(address).unwrap_or(0)),
            count,
        };
        let elf = bbv_files::folder::plain_path(&path).display().to_string();
        let region = RegionCheckpoint {
            id,
            cluster: p.cluster,
            weight: p.weight,
            multiplier: p.multiplier,
            file: name,
            start: marker(start_marker, 1, capture.pc),
            region_start: marker(rs_marker, rs_total - before(rs_marker), address(rs_marker)?),
            end: marker(end_marker, inputs.end_count, end_pc),
            // As the pass measured it: a warmup from the program's start that shares the
            // region's start marker is none.
            warmup_instructions: (at.events.get(&(2 * r)))
                .map_or(0, |e| e.0.saturating_sub(capture.instructions)),
            region_instructions: p.length,
            start_instruction: capture.instructions,
            memory_bytes: built.memory_bytes,
            file_bytes,
            fingerprint: format!("{:016x}", built.fingerprint),
            restorer: (built.restorer.iter())
                .map(|(a, b)| [format!("{a:#x}"), format!("{b:#x}")])
                .collect(),
            notes: (built.notes.iter().cloned())
                .chain(unreproducible(&at.calls[r], &built.closed))
                .collect(),
            syscalls: at.calls[r].total,
            commands: Commands::of(&elf, s.cpu.as_deref()),
        };
        Ok(Built {
            region,
            memory,
            open: capture.fds.iter().map(|d| d.fd).collect(),
        })
    }
}

/// Builds region `id`'s checkpoint from `inp`, its memory file made executable: what the
/// build says and the file's size.
fn build_file(
    inp: &bbv_checkpoint::Inputs,
    id: usize,
) -> Result<(bbv_checkpoint::Built, u64), ReplayError> {
    let built = bbv_checkpoint::build(inp).map_err(|e| match e {
        bbv_checkpoint::CheckpointError::Io { path, source } => ReplayError::io(&path, source),
        e => ReplayError::Invalid(format!("region {id}: {e}")),
    })?;
    let file_bytes = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(inp.memory, std::fs::Permissions::from_mode(0o755))
            .and_then(|_| std::fs::metadata(inp.memory))
            .map_err(|e| ReplayError::io(inp.memory, e))?
            .len()
    };
    Ok((built, file_bytes))
}

/// A region's checkpoint, built.
struct Built {
    region: RegionCheckpoint,
    /// Its file, to be renamed to `region.file`.
    memory: PathBuf,
    /// The descriptors open at the capture.
    open: Vec<i32>,
}

/// The file of region `id`'s calls in the replay ([`crate::checkpoint_calls`]).
pub fn calls_file(id: usize) -> String {
    format!("region-{id}.syscalls")
}

/// The prefix of the folder in the checkpoints' where the plugin writes memory files.
const STAGING: &str = ".bbv-checkpoint-";

/// The table of the replay's blocks in `blocks.tsv`: `RUNTIME BYTES IMAGE OFFSET` (hex), so
/// that `--check` names the code it runs from the checkpoints' file as the profile does.
pub const BLOCKS: &str = "blocks.tsv";

fn write_blocks(c: &bbv_collect::Collected, w: &mut impl std::io::Write) -> std::io::Result<()> {
    for b in &c.blocks {
        if let Some(i) = b.image {
            writeln!(
                w,
                "{:x}\t{}\t{}\t{:x}",
                b.runtime_address,
                b.bytes,
                c.images[i].name(),
                b.address
            )?;
        }
    }
    Ok(())
}

/// What building a region's checkpoint reads besides its capture.
struct Where<'a> {
    s: &'a Summary,
    events: &'a bbv_collect::Events,
    plan: &'a MarkerPlan<'a>,
    addresses: &'a std::collections::HashMap<usize, u64>,
    collected: &'a bbv_collect::Collected,
    /// Per region, its calls in the replay.
    calls: &'a [bbv_plugin_contract::syscalls::Window],
    /// Where the plugin wrote the memory files.
    staging: &'a Path,
    dir: &'a Path,
}

impl Where<'_> {
    /// The marker and count of event `ev`.
    fn marker_of(&self, ev: usize) -> Result<(usize, u64), ReplayError> {
        (self.plan.targets.iter())
            .find(|t| t.2 == ev)
            .map(|t| (t.0, t.1))
            .ok_or_else(|| ReplayError::Invalid(format!("no marker for event {ev}")))
    }
}

/// Removes what an earlier `bbv checkpoint` into the same folder left that this one did not
/// write (another run's regions) and the check of the earlier checkpoints, so that the folder
/// never mixes two.
fn remove_stale(dir: &Path, report: &CheckpointReport) -> Result<(), ReplayError> {
    let ours = |name: &str| {
        report.regions.iter().any(|r| {
            name == r.file || name == format!("region-{}.files", r.id) || name == calls_file(r.id)
        })
    };
    let entries = std::fs::read_dir(dir).map_err(|e| ReplayError::io(dir, e))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let gone = match name.as_str() {
            "check.json" => std::fs::remove_file(&path),
            n if n.starts_with("region-") && !ours(n) => {
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
            }
            _ => Ok(()),
        };
        gone.map_err(|e| ReplayError::io(&path, e))?;
    }
    Ok(())
}

/// Marker index -> guest address, from `checkpoint.markers` (`path`).
fn marker_addresses(path: &Path) -> Result<std::collections::HashMap<usize, u64>, ReplayError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ReplayError::io(path, e)),
    };
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let (m, a) = l.split_once(' ').unwrap_or((l, ""));
            match (m.parse(), u64::from_str_radix(a, 16)) {
                (Ok(m), Ok(a)) => Ok((m, a)),
                _ => Err(ReplayError::Invalid(format!(
                    "{}:{}: expected MARKER HEX",
                    path.display(),
                    i + 1
                ))),
            }
        })
        .collect()
}

/// Checkpoints read the guest's registers (QEMU 9.1 or later) and must come from the QEMU the
/// run was profiled under: another one's CPU model picks other library routines, so the
/// markers would not be where the profile put them.
pub(crate) fn same_qemu(p: &bbv_collect::Prepared, s: &Summary) -> Result<(), ReplayError> {
    if p.isa != bbv_collect::Isa::X86_64 {
        return Err(ReplayError::Invalid(format!(
            "{}: checkpoints are made of x86-64 programs only",
            p.program.display()
        )));
    }
    let version = bbv_collect::qemu_version(&p.qemu).unwrap_or_default();
    if p.api == bbv_collect::PluginApi::V1 {
        return Err(ReplayError::Invalid(format!(
            "{} is QEMU {version}: checkpoints read the guest's registers, which needs QEMU 9.1 \
             or later (scripts/build-qemu builds 10.0; give it with --qemu)",
            p.qemu.display()
        )));
    }
    if version != s.qemu {
        return Err(ReplayError::Invalid(format!(
            "the run was profiled under QEMU {}, this would checkpoint under {} ({version}): \
             another QEMU's CPU model picks other library routines, so profile again with \
             --qemu {}",
            s.qemu,
            p.qemu.display(),
            p.qemu.display()
        )));
    }
    Ok(())
}
