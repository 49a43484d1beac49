//! `bbv checkpoint --check CKDIR`: runs every checkpoint under QEMU with bbv's collector
//! watching three of its instructions (its first, the region's start, the region's end) and
//! compares each with the profile: the end reached, the instructions from the start to the
//! end, and the region's vector against the profiled interval's.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bbv_files::AtomicFiles;
use serde::Serialize;

use crate::checkpoint::{calls_file, CheckpointReport, RegionCheckpoint, BLOCKS};
use crate::checkpoint_calls::{self, CallsCheck};
use crate::replay::{filtered_between, keyed, l1, points_profile, Key};
use crate::ReplayError;
use bbv_rundir as rundir;

/// What `--check` asks for.
#[derive(Clone, Debug)]
pub struct CheckRequest {
    /// The checkpoints' folder.
    pub dir: PathBuf,
    /// QEMU to use instead of the one the run was profiled with (or, where that one is gone,
    /// the one on PATH).
    pub qemu: Option<PathBuf>,
    /// Plugin library to use.
    pub plugin: Option<PathBuf>,
    /// Largest |deviation| accepted, in percent.
    pub tolerance_pct: f64,
}

/// One checkpoint's check (`check.json`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CheckedRegion {
    /// Region id.
    pub id: usize,
    /// The end marker was reached at its count.
    pub reached_end: bool,
    /// Instructions from the checkpoint's start to the region's end in the profile (warmup
    /// included).
    pub profile_length: u64,
    /// The same in the checkpoint's run (the restorer's own instructions left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_length: Option<u64>,
    /// 100 x (checkpoint - profile) / profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deviation_pct: Option<f64>,
    /// L1 distance (0..2) between the region's vector in the checkpoint's run and the profiled
    /// interval's, blocks matched by (image, offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbv_l1: Option<f64>,
    /// The checkpoint's exit status under QEMU.
    pub exit_status: i32,
    /// Its system calls against the replay's, call by call (none when not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<CallsCheck>,
    /// What the checkpoint could not restore as it was (from checkpoints.json), and the first
    /// system call that differs.
    pub notes: Vec<String>,
}

/// Every checkpoint's check.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CheckReport {
    /// Largest |deviation| accepted.
    pub tolerance_pct: f64,
    /// Per region.
    pub regions: Vec<CheckedRegion>,
}

impl CheckReport {
    /// Every end reached within the tolerance.
    pub fn passed(&self) -> bool {
        self.failure().is_none()
    }

    /// Why the check failed (None when it passed): the regions that missed their end or
    /// ran too long or short.
    pub fn failure(&self) -> Option<String> {
        let off: Vec<String> = (self.regions.iter())
            .filter(|r| {
                !r.reached_end
                    || !r
                        .deviation_pct
                        .is_some_and(|d| d.abs() <= self.tolerance_pct)
            })
            .map(|r| r.id.to_string())
            .collect();
        (!off.is_empty()).then(|| {
            format!(
                "the checkpoints of region {} missed their end or ran more than {}% off the profile's length",
                off.join(", "),
                self.tolerance_pct
            )
        })
    }

    /// The table `--check` prints.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "region  end  profile length  checkpoint length  deviation    bbv L1  status  syscalls\n",
        );
        for r in &self.regions {
            let _ = writeln!(
                s,
                "{:>6}  {:>3}  {:>14}  {:>17}  {:>9}  {:>8}  {:>6}  {:>8}",
                r.id,
                if r.reached_end { "yes" } else { "NO" },
                r.profile_length,
                r.checkpoint_length.map_or("-".into(), |n| n.to_string()),
                r.deviation_pct.map_or("-".into(), |d| format!("{d:+.4}%")),
                r.bbv_l1.map_or("-".into(), |d| format!("{d:.4}")),
                r.exit_status,
                match &r.syscalls {
                    Some(c) if c.same() => "same",
                    Some(_) => "DIFFER",
                    None => "-",
                },
            );
            for n in &r.notes {
                let _ = writeln!(s, "        note: {n}");
            }
        }
        let verdict = match self.passed() {
            true => "every checkpoint reached its end within the tolerance",
            false => "FAILED: a checkpoint missed its end or its length is off",
        };
        let same = (self.regions.iter())
            .filter(|r| r.syscalls.as_ref().is_some_and(|c| c.same()))
            .count();
        let _ = writeln!(
            s,
            "{verdict} (tolerance {}%); {same} of {} made the replay's system calls",
            self.tolerance_pct,
            self.regions.len()
        );
        s
    }
}

fn bad(path: &Path, what: impl std::fmt::Display) -> ReplayError {
    ReplayError::Invalid(format!("{}: {what}", path.display()))
}

/// The run directory the checkpoints are of, by its identity: where it was when checkpointed,
/// or the checkpoints' parent folder (`DIR/checkpoints` moved with its run); another run in
/// either place is refused, naming both identities.
fn run_of(
    dir: &Path,
    report: &CheckpointReport,
) -> Result<(PathBuf, rundir::Summary), ReplayError> {
    let Some(id) = &report.run_id else {
        return Ok((report.run.clone(), rundir::read_summary(&report.run)?));
    };
    let mut found = Vec::new();
    let beside = std::path::absolute(dir)
        .ok()
        .and_then(|d| d.parent().map(Path::to_path_buf));
    for candidate in std::iter::once(report.run.clone()).chain(beside) {
        match rundir::read_summary(&candidate) {
            Ok(s) if s.identity() == *id => return Ok((candidate, s)),
            Ok(s) => found.push(format!(
                "{} holds run {}",
                candidate.display(),
                s.identity()
            )),
            Err(_) => found.push(format!("{} holds no run", candidate.display())),
        }
    }
    Err(ReplayError::Invalid(format!(
        "{}: the checkpoints are of run {id} (made from {}), and {}: check them beside their run, or checkpoint the run again",
        dir.join(bbv_rundir::files::CHECKPOINTS_JSON).display(),
        report.run.display(),
        found.join("; ")
    )))
}

/// Reads `checkpoints.json` and checks every file it names is the one written.
fn load(dir: &Path) -> Result<CheckpointReport, ReplayError> {
    let path = dir.join(bbv_rundir::files::CHECKPOINTS_JSON);
    let text = bbv_files::input::read_text(&path, 64 << 20)?;
    let report: CheckpointReport = serde_json::from_str(&text)
        .map_err(|e| bad(&path, format!("not a bbv checkpoint folder's index: {e}")))?;
    if report.regions.is_empty() {
        return Err(bad(&path, "lists no checkpoint: nothing to check"));
    }
    for r in &report.regions {
        // Only files of the folder itself: a name like ../../etc/passwd is no checkpoint.
        if !bbv_files::input::is_file_name(&r.file) {
            return Err(bad(
                &path,
                format!("region {}: {:?} is not a file of this folder", r.id, r.file),
            ));
        }
        // What the check hands QEMU's plugin and compares against: an address that is no
        // hexadecimal number or a count of 0 would be the plugin's complaint, not this file's.
        for (what, m) in [
            ("start", &r.start),
            ("region_start", &r.region_start),
            ("end", &r.end),
        ] {
            let addresses = [&m.offset, &m.address, &m.file_offset];
            if let Some(a) = addresses.iter().find(|a| !is_hex(a)) {
                return Err(bad(
                    &path,
                    format!(
                        "region {}: {what} address {} is not a hexadecimal number",
                        r.id,
                        bbv_files::input::quote(a.as_bytes())
                    ),
                ));
            }
            if m.count == 0 || m.count > bbv_pipeline::MAX_INSTRUCTIONS {
                return Err(bad(
                    &path,
                    format!("region {}: {what} count {} is out of range", r.id, m.count),
                ));
            }
        }
        let elf = dir.join(&r.file);
        let f = std::fs::File::open(&elf).map_err(|e| ReplayError::io(&elf, e))?;
        let len = f.metadata().map_err(|e| ReplayError::io(&elf, e))?.len();
        let print = bbv_checkpoint::fingerprint(std::io::BufReader::new(f))
            .map_err(|e| ReplayError::io(&elf, e))?;
        if len != r.file_bytes || format!("{print:016x}") != r.fingerprint {
            return Err(bad(
                &elf,
                format!(
                    "{len} bytes, fingerprint {print:016x}; checkpoints.json says {} bytes, {}: \
                     the checkpoint changed since bbv checkpoint wrote it",
                    r.file_bytes, r.fingerprint
                ),
            ));
        }
    }
    Ok(report)
}

/// `0x` and 1 to 16 hexadecimal digits, as bbv checkpoint writes addresses.
fn is_hex(s: &str) -> bool {
    let digits = s.strip_prefix("0x").unwrap_or("");
    (1..=16).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The checkpoint pass's blocks: (runtime address, bytes, image, link-time offset), sorted.
fn pass_blocks(dir: &Path) -> Result<Vec<(u64, u64, String, u64)>, ReplayError> {
    let path = dir.join(BLOCKS);
    let text = bbv_files::input::read_text(&path, 1 << 30)?;
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let row = match f[..] {
            [a, n, image, o] => (|| Some((hex(a)?, n.parse().ok()?, image.to_string(), hex(o)?)))(),
            _ => None,
        };
        v.push(row.ok_or_else(|| {
            bad(
                &path,
                format!("line {}: expected RUNTIME BYTES IMAGE OFFSET", i + 1),
            )
        })?);
    }
    v.sort_unstable_by_key(|b| b.0);
    Ok(v)
}

/// The profile's name of the block holding runtime address `a`: the pass's block that holds
/// it. A checkpoint's run cuts blocks where the pass did not (its int3 on the end instruction
/// ends one), so its pieces count toward the block they are part of, as in the profile.
fn key_at(pass: &[(u64, u64, String, u64)], a: u64) -> Option<Key> {
    let i = pass.partition_point(|b| b.0 <= a).checked_sub(1)?;
    let (start, bytes, image, offset) = &pass[i];
    (a < start + bytes.max(&1)).then(|| (image.clone(), *offset))
}

/// Runs `--check`; `Err` = bad input, found before anything ran.
pub fn check(req: &CheckRequest) -> Result<CheckReport, ReplayError> {
    crate::replay::check_tolerance(req.tolerance_pct)?;
    let mut report = load(&req.dir)?;
    // A checkpoint writes its outputs where it was made (the path is in it): checked from
    // another folder, it would write there, or fail.
    let here = std::fs::canonicalize(&req.dir).map_err(|e| ReplayError::io(&req.dir, e))?;
    if std::fs::canonicalize(&report.dir).ok().as_ref() != Some(&here) {
        return Err(bad(
            &req.dir.join(bbv_rundir::files::CHECKPOINTS_JSON),
            format!(
                "the checkpoints were made in {} and write their outputs there (the path is in each): check them in that folder, or checkpoint the run again here",
                report.dir.display()
            ),
        ));
    }
    let (run, s) = run_of(&req.dir, &report)?;
    report.run = run;
    // The QEMU the run was profiled with, as every command on a run directory defaults to.
    let req = &CheckRequest {
        qemu: s.qemu_or(req.qemu.as_deref()),
        ..req.clone()
    };
    let blocks = rundir::read_blocks(&report.run.join(bbv_rundir::files::BLOCKS))?;
    let profile = points_profile(&report.run, &s, blocks.len())?;
    let profile_keys: Vec<Option<Key>> = blocks
        .iter()
        .map(|b| b.image.clone().map(|i| (i, b.offset)))
        .collect();
    let pass = pass_blocks(&req.dir)?;
    let mut regions = Vec::new();
    let mut outputs = Vec::new();
    for r in &report.regions {
        let point = s
            .points
            .iter()
            .find(|p| bbv_pipeline::regions::region_id(p) == r.id);
        let vector = point.and_then(|p| profile.kept.get(&p.interval));
        let want = vector.map(|v| keyed(v, &profile_keys));
        let (checked, output) = run_one(req, &report.dir, r, &pass, want.as_ref())?;
        regions.push(checked);
        outputs.push((r.id, output));
    }
    let out = CheckReport {
        tolerance_pct: req.tolerance_pct,
        regions,
    };
    // Staged once the checkpoints ran: they write their outputs into the folder itself, as
    // they would anywhere, and the stage is to carry them.
    bbv_files::folder::update(&req.dir, |dir| -> Result<(), ReplayError> {
        let mut files = AtomicFiles::default();
        // Each checkpoint's own output, kept apart from the table.
        for (id, output) in &outputs {
            files.write(&dir.join(format!("region-{id}.check.out")), |w| {
                std::io::Write::write_all(w, output)
            })?;
        }
        files.write(&dir.join("check.json"), |w| {
            serde_json::to_writer_pretty(&mut *w, &out)?;
            std::io::Write::write_all(w, b"\n")
        })?;
        files.commit()?;
        Ok(())
    })?;
    Ok(out)
}

/// The plugin's marker file for checkpoint `r`: events 0 (its first instruction), 1 (the
/// region's start) and 2 (its end), the instructions named by their offset in its own file.
fn write_markers(r: &RegionCheckpoint, markers: &Path) -> Result<(), ReplayError> {
    // Events: 0 the checkpoint's first instruction, 1 the region's start, 2 its end.
    let mut text = String::new();
    let mut index: Vec<&str> = Vec::new();
    for (event, m) in [&r.start, &r.region_start, &r.end].into_iter().enumerate() {
        let i = match index.iter().position(|o| *o == m.file_offset) {
            Some(i) => i,
            None => {
                let off = m.file_offset.trim_start_matches("0x");
                let _ = writeln!(text, "pc {} {off} {}", index.len(), r.file);
                index.push(&m.file_offset);
                index.len() - 1
            }
        };
        let _ = writeln!(text, "target {i} {} {event}", m.count);
    }
    // Marker lines first, then targets, as the plugin reads them.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_by_key(|l| !l.starts_with("pc "));
    std::fs::write(markers, lines.join("\n") + "\n").map_err(|e| ReplayError::io(markers, e))
}

/// Runs one checkpoint under the collector; returns its check and its output (standard output
/// and error together, of its last run).
fn run_one(
    req: &CheckRequest,
    dir: &Path,
    r: &RegionCheckpoint,
    pass: &[(u64, u64, String, u64)],
    want: Option<&HashMap<Key, u64>>,
) -> Result<(CheckedRegion, Vec<u8>), ReplayError> {
    let work = tempfile::Builder::new()
        .prefix(".bbv-check-")
        .tempdir()
        .map_err(|e| ReplayError::io(std::env::temp_dir(), e))?;
    let markers = work.path().join("markers");
    write_markers(r, &markers)?;
    let request = bbv_collect::Request {
        guest: bbv_collect::Guest {
            program: dir.join(&r.file).display().to_string(),
            args: Vec::new(),
            launch: bbv_collect::Launch {
                qemu: req.qemu.clone(),
                plugin: req.plugin.clone(),
                ..Default::default()
            },
        },
        counting: bbv_collect::PluginConfig {
            interval: u64::MAX / 4,
            count_only: true,
            markers: Some(markers),
            syscalls: true,
            ..Default::default()
        },
        work_dir: work.path().to_path_buf(),
    };
    // QEMU's own mappings (its translation buffer among them) lie where the host's address
    // randomization puts them and can take an address the checkpoint needs (it exits 100,
    // saying so): another run places them elsewhere.
    let output = work.path().join("output");
    let launch = || -> Result<bbv_collect::Outcome, ReplayError> {
        Ok(bbv_collect::prepare(request.clone())?
            .output_to(output.clone())
            .run()?)
    };
    let mut outcome = launch()?;
    for _ in 0..2 {
        if outcome.status.code() != bbv_checkpoint::EXIT_RESTORE_FAILED {
            break;
        }
        outcome = launch()?;
    }
    let printed = std::fs::read(&output).map_err(|e| ReplayError::io(&output, e))?;
    let exit_status = outcome.status.code();
    let c = outcome.collected?;
    let events = c.events()?;
    let ours: Vec<(u64, u64)> = (r.restorer.iter())
        .map(|[a, b]| (hex(a).unwrap_or(0), hex(b).unwrap_or(0)))
        .collect();
    // The restorer's code (its handlers, the moved end instruction) is not the program's.
    let counted: Vec<bool> = (c.blocks.iter())
        .map(|b| {
            !ours
                .iter()
                .any(|&(lo, hi)| (lo..hi).contains(&b.runtime_address))
        })
        .collect();
    let between = |a: usize, b: usize| match (events.get(&a), events.get(&b)) {
        (Some(x), Some(y)) => Some(filtered_between(x, y, &counted)),
        _ => None,
    };
    let checkpoint_length = between(0, 2);
    let profile_length = r.warmup_instructions + r.region_instructions;
    let keys: Vec<Option<Key>> = (c.blocks.iter())
        .zip(&counted)
        .map(|(b, &ok)| {
            if ok {
                key_at(pass, b.runtime_address)
            } else {
                None
            }
        })
        .collect();
    let bbv_l1 = region_l1(&events, &counted, &keys, want);
    let mut notes = r.notes.clone();
    let syscalls = compare_calls(dir, r, &c.syscalls(), &mut notes)?;
    let checked = CheckedRegion {
        id: r.id,
        reached_end: events.contains_key(&2) && exit_status == 0,
        profile_length,
        checkpoint_length,
        deviation_pct: checkpoint_length
            .map(|l| 100.0 * (l as f64 - profile_length as f64) / profile_length.max(1) as f64),
        bbv_l1,
        exit_status,
        syscalls,
        notes,
    };
    Ok((checked, printed))
}

/// The checkpoint's calls from its start to the region's end (`log`, its run's) against the
/// replay's (`region-R.syscalls`); the first difference, or why they were not compared, goes
/// into `notes`.
fn compare_calls(
    dir: &Path,
    r: &RegionCheckpoint,
    log: &Path,
    notes: &mut Vec<String>,
) -> Result<Option<CallsCheck>, ReplayError> {
    let file = dir.join(calls_file(r.id));
    if !file.exists() {
        notes.push(format!(
            "system calls not compared: no {} (checkpoints of an earlier bbv)",
            calls_file(r.id)
        ));
        return Ok(None);
    }
    let (profile, open) = checkpoint_calls::read(&file)?;
    let here = checkpoint_calls::log_windows(log, &[(vec![0], 2)])?;
    let Some(here) = here.into_iter().next().flatten() else {
        notes.push("system calls not compared: the region's end was not reached".into());
        return Ok(None);
    };
    let check = checkpoint_calls::compare(&profile, &open, &here);
    if let Some(d) = &check.first_difference {
        notes.push(format!("system calls differ from the replay's: {d}"));
    }
    if check.other_addresses > 0 {
        notes.push(format!(
            "{} mmap/mremap calls returned other addresses than in the replay (QEMU places \
             mappings by the host's randomized layout): work that depends on addresses may \
             differ a little",
            check.other_addresses
        ));
    }
    Ok(Some(check))
}

/// The L1 distance between the region's vector in the checkpoint's run (events 1 to 2, its
/// blocks named by `keys`, the restorer's left out by `counted`) and the profile's `want`.
fn region_l1(
    events: &bbv_collect::Events,
    counted: &[bool],
    keys: &[Option<Key>],
    want: Option<&HashMap<Key, u64>>,
) -> Option<f64> {
    match (events.get(&1), events.get(&2), want) {
        (Some(a), Some(b), Some(want)) => {
            let before: HashMap<u32, u64> = a.1.iter().copied().collect();
            let diff: Vec<(u32, u64)> = (b.1.iter())
                .filter(|(id, _)| {
                    let i = (*id as usize).checked_sub(1);
                    i.and_then(|i| counted.get(i)).copied().unwrap_or(false)
                })
                .map(|&(id, n)| (id, n - before.get(&id).copied().unwrap_or(0).min(n)))
                .filter(|x| x.1 > 0)
                .collect();
            Some(l1(&keyed(&diff, keys), want))
        }
        _ => None,
    }
}
