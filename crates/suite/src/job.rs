//! Running one job and recording it in `OUT/<name>/job.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::manifest::{Job, Kind};
use crate::SuiteError;

/// How a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Finished with exit status 0.
    Done,
    /// The program or bbv failed, or the job timed out or was killed.
    Failed,
    /// Done before with the same settings: not run again.
    Skipped,
    /// Running now (or killed while running, if nothing runs it).
    Running,
    /// Not started.
    Pending,
}

impl Status {
    /// The name in `job.json` and `summary.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Running => "running",
            Status::Pending => "pending",
        }
    }

    fn from_name(s: &str) -> Option<Status> {
        [
            Status::Done,
            Status::Failed,
            Status::Skipped,
            Status::Running,
            Status::Pending,
        ]
        .into_iter()
        .find(|st| st.name() == s)
    }
}

/// What `job.json` records.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// done, failed or running (a skipped job keeps its done record).
    pub status: Status,
    /// 1 for the first run, then one more per run.
    pub attempt: u64,
    /// Seconds since the epoch.
    pub started: u64,
    /// Seconds since the epoch (0 while running).
    pub finished: u64,
    /// bbv's exit status (128+N for a signal; None while running).
    pub exit: Option<i32>,
    /// Wall time.
    pub seconds: f64,
    /// Peak resident memory of bbv and QEMU, KiB.
    pub peak_kib: u64,
    /// Why it failed (a timeout, a signal), if it did.
    pub reason: Option<String>,
    /// The hash of the job's effective settings ([`settings_hash`]).
    pub hash: String,
}

impl JobRecord {
    /// Whether it says the job is done with the settings of `hash` ([`settings_hash`]).
    pub fn done_with(&self, hash: &str) -> bool {
        self.status == Status::Done && self.hash == hash
    }

    /// Reads `DIR/job.json`, if there is a readable one.
    pub fn read(dir: &Path) -> Option<JobRecord> {
        let text = bbv_files::input::read_text(&dir.join("job.json"), 1 << 20).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some(JobRecord {
            status: Status::from_name(v["status"].as_str()?)?,
            attempt: v["attempt"].as_u64()?,
            started: v["started"].as_u64()?,
            finished: v["finished"].as_u64().unwrap_or(0),
            exit: v["exit"].as_i64().map(|e| e as i32),
            seconds: v["seconds"].as_f64().unwrap_or(0.0),
            peak_kib: v["peak_kib"].as_u64().unwrap_or(0),
            reason: v["reason"].as_str().map(str::to_string),
            hash: v["hash"].as_str()?.to_string(),
        })
    }

    /// Writes `DIR/job.json` (a temporary file, then a rename).
    pub fn write(&self, dir: &Path) -> Result<(), SuiteError> {
        let v = json!({
            "status": self.status.name(),
            "attempt": self.attempt,
            "started": self.started,
            "finished": self.finished,
            "exit": self.exit,
            "seconds": (self.seconds * 1000.0).round() / 1000.0,
            "peak_kib": self.peak_kib,
            "reason": self.reason,
            "hash": self.hash,
        });
        bbv_files::write_atomic(&dir.join("job.json"), format!("{v:#}\n").as_bytes())?;
        Ok(())
    }
}

/// A stable hash (FNV-1a, 64 bits, in hex) of what decides a job's results: its entry with
/// the defaults applied (not its timeout), the bbv version, and the program's build id (or
/// size and modification time where it has none) or the trace list's.
pub fn settings_hash(job: &Job, bbv_version: &str) -> String {
    let mut entry = job.clone();
    (entry.line, entry.timeout) = (0, None);
    let mut text = format!("bbv {bbv_version}\n{entry:?}\n");
    let file = match &job.kind {
        Kind::Cpu { program, .. } => program.clone(),
        Kind::Gpu { traces } => traces.clone(),
    };
    match bbv_collect::ElfFacts::read(&file).and_then(|f| f.build_id) {
        Some(id) => text.push_str(&format!("build id {id}\n")),
        None => {
            if let Ok(m) = file.metadata() {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
                text.push_str(&format!("size {} mtime {:?}\n", m.len(), mtime));
            }
        }
    }
    format!("{:016x}", bbv_files::fnv1a(text.as_bytes()))
}

/// How long a job killed for its timeout has to end after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(10);

/// Runs `job` with `bbv` (this program) into `out/<name>`, unless `job.json` there says it is
/// done with the same settings (then [`Status::Skipped`]). Its output goes to `log`.
pub fn run_job(bbv: &Path, job: &Job, out: &Path, version: &str) -> Result<JobRecord, SuiteError> {
    let dir = out.join(&job.name);
    std::fs::create_dir_all(&dir).map_err(|e| SuiteError::io(&dir, e))?;
    let hash = settings_hash(job, version);
    let previous = JobRecord::read(&dir);
    if let Some(p) = &previous {
        if p.done_with(&hash) {
            return Ok(JobRecord {
                status: Status::Skipped,
                ..p.clone()
            });
        }
    }
    remove_leftovers(&dir);
    let mut record = JobRecord {
        status: Status::Running,
        attempt: previous.map_or(1, |p| p.attempt + 1),
        started: now(),
        finished: 0,
        exit: None,
        seconds: 0.0,
        peak_kib: 0,
        reason: None,
        hash,
    };
    record.write(&dir)?;
    let log_path = dir.join("log");
    let log = std::fs::File::create(&log_path).map_err(|e| SuiteError::io(&log_path, e))?;
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let out_dir = std::path::absolute(&dir).map_err(|e| SuiteError::io(&dir, e))?;
    let start = Instant::now();
    // The steps run one after the other into the same log, within the job's one timeout; the
    // first that fails ends the job.
    for args in job.steps(&out_dir) {
        let stdin = match &job.stdin {
            Some(p) => Stdio::from(std::fs::File::open(p).map_err(|e| SuiteError::io(p, e))?),
            None => Stdio::null(),
        };
        let clone = || log.try_clone().map_err(|e| SuiteError::io(&log_path, e));
        let mut cmd = Command::new(bbv);
        cmd.args(args)
            .current_dir(&job.cwd)
            .env_clear()
            .envs(job.environment(&home))
            .stdin(stdin)
            .stdout(clone()?)
            .stderr(clone()?);
        let child = bbv_files::interrupt::spawn(&mut cmd).map_err(|e| SuiteError::io(bbv, e))?;
        let left = job.timeout.map(|t| t.saturating_sub(start.elapsed()));
        let (status, peak, reason) = wait(child.id(), left, job.timeout)?;
        record.peak_kib = record.peak_kib.max(peak);
        record.exit = Some(status);
        record.reason = reason;
        if status != 0 || record.reason.is_some() || bbv_files::interrupt::received().is_some() {
            break;
        }
    }
    record.seconds = start.elapsed().as_secs_f64();
    record.finished = now();
    record.status = if record.exit == Some(0) && record.reason.is_none() {
        Status::Done
    } else {
        Status::Failed
    };
    if bbv_files::interrupt::received().is_some() {
        // The suite itself is being stopped: the job runs again next time.
        record.status = Status::Failed;
        record.reason = Some("the suite was stopped".into());
    }
    record.write(&dir)?;
    Ok(record)
}

/// Waits for one of the job's bbv commands, killing it after `left` (what remains of the job's
/// `timeout`): (exit status or 128+signal, peak KiB, why it failed beyond its status).
fn wait(
    pid: u32,
    left: Option<Duration>,
    timeout: Option<Duration>,
) -> Result<(i32, u64, Option<String>), SuiteError> {
    let start = Instant::now();
    let mut reason = None;
    let mut termed: Option<Instant> = None;
    let io = |e| SuiteError::io("bbv", e);
    loop {
        if bbv_files::interrupt::ended(pid, false).map_err(io)? {
            break;
        }
        if let (Some(l), Some(t)) = (left, timeout) {
            if termed.is_none() && start.elapsed() > l {
                reason = Some(format!("timed out after {} s", t.as_secs()));
                // SAFETY: our unreaped child.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                termed = Some(Instant::now());
            }
        }
        if termed.is_some_and(|t| t.elapsed() > KILL_GRACE) {
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            termed = Some(Instant::now() + Duration::from_secs(3600));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut status = 0;
    // SAFETY: rusage is plain data; reaps our ended child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    if rc < 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok((code, usage.ru_maxrss.max(0) as u64, reason))
}

/// A run killed with SIGKILL leaves its collect folder; a new attempt starts clean of it.
fn remove_leftovers(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".bbv-collect-") || name.contains(".bbv-tmp-") {
                let p: PathBuf = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
