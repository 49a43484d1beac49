//! bbv-collect: the host side of collecting basic-block vectors under QEMU user mode.
//!
//! [`prepare`] checks everything that can be checked before the guest runs (the program is an
//! ELF of a supported ISA, QEMU and the plugin exist); [`Prepared::run`] runs the guest under
//! `qemu-<isa> -plugin libbbv_qemu.so` with the guest's own stdin, stdout and stderr, then reads
//! what the plugin wrote and symbolizes the blocks from the ELF symbol tables of every file the
//! guest had mapped (QEMU's own symbol lookup only knows the main binary).
//!
//! # Design constraints
//! * The guest is untouched: its standard streams, its exit status (signals as 128+N).
//! * Nothing lands in the user's directories until the caller moves finished files into place.
//! * Blocks are identified by (file, offset), so results do not depend on load addresses.

mod elf;
mod error;
mod pattern;
mod qemu;
mod state;
pub mod sysroot;
mod table;

pub use elf::{
    find_on_path, isa_of_elf, qemu_version, resolve_program, ElfFacts, Isa, ModuleSymbols,
};
pub use error::CollectError;
pub use pattern::expand;
pub use qemu::{find_plugin, plugin_api, PluginApi};
pub use table::{write_blocks_tsv, write_pc, Block, Image};

use bbv_files::interrupt;
use bbv_plugin_contract::files;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How QEMU runs a guest: which QEMU, plugin, CPU model and sysroot (None: found, or the run's
/// own where a command works on a run directory).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Launch {
    /// QEMU executable to use instead of `qemu-<isa>` from PATH.
    pub qemu: Option<PathBuf>,
    /// Plugin library to use instead of `$BBV_PLUGIN` or the one next to the running binary.
    pub plugin: Option<PathBuf>,
    /// QEMU's guest CPU model (`-cpu`), instead of QEMU's default.
    pub cpu: Option<String>,
    /// A foreign dynamically linked guest's sysroot (`qemu -L`): None to find it
    /// ([`sysroot::find`]); [`prepare`] fills in the one found.
    pub sysroot: Option<PathBuf>,
}

/// A guest program, its arguments and how QEMU runs it: the one description of a launch that
/// every command running a program shares (collect, run, replay, trace, checkpoint, simulate
/// --full, checkpoint --check).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Guest {
    /// The program (a path, or a name looked up on PATH).
    pub program: String,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How QEMU runs it.
    pub launch: Launch,
}

impl Guest {
    /// The guest of a command line (the program, then its arguments); Err says why there is
    /// none (no program, or a program name that is not UTF-8).
    pub fn from_command(command: &[OsString], launch: Launch) -> Result<Guest, String> {
        let (program, args) = command.split_first().ok_or("no program given")?;
        let program = program
            .to_str()
            .ok_or_else(|| format!("{}: program name is not UTF-8", program.to_string_lossy()))?;
        Ok(Guest {
            program: program.to_string(),
            args: args.to_vec(),
            launch,
        })
    }
}

/// What to collect and from which program.
#[derive(Clone, Debug)]
pub struct Request {
    /// The program and how it runs.
    pub guest: Guest,
    /// What the plugin counts and records (its `dir` is filled in at launch).
    pub counting: PluginConfig,
    /// Directory to hold the plugin's files while the guest runs (best on the same file
    /// system as the final outputs, so they can be renamed into place).
    pub work_dir: PathBuf,
}

pub use bbv_plugin_contract::events::Events;
/// The caches of the metrics' model (`--l1d`, `--l2`): the plugin's metrics settings.
pub use bbv_plugin_contract::MetricsConfig as CacheModel;
pub use bbv_plugin_contract::PluginConfig;

/// A request whose program, QEMU and plugin were found.
#[derive(Debug)]
pub struct Prepared {
    request: Request,
    /// The program's path.
    pub program: PathBuf,
    /// Its ISA.
    pub isa: Isa,
    /// The QEMU executable.
    pub qemu: PathBuf,
    /// The plugin library.
    pub plugin: PathBuf,
    /// Its API level.
    pub api: PluginApi,
    /// Where the guest's standard output and error go instead of bbv's ([`Prepared::output_to`]).
    output: Option<PathBuf>,
}

impl Prepared {
    /// Sends the guest's standard output and error, together, to `file` (created or
    /// truncated when the guest starts) instead of bbv's own.
    pub fn output_to(mut self, file: PathBuf) -> Prepared {
        self.output = Some(file);
        self
    }

    /// The request as it will run.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Threads take deterministic turns of `quantum` instructions instead of being paced, if
    /// this QEMU allows it (9.1 and later); false otherwise, nothing changed.
    pub fn take_turns(&mut self, quantum: u64) -> bool {
        if self.api == PluginApi::V1 {
            return false;
        }
        self.request.counting.turns = quantum.max(1);
        self.request.counting.flow = 0;
        true
    }
}

/// Checks the request without running anything.
pub fn prepare(request: Request) -> Result<Prepared, CollectError> {
    let mut request = request;
    let program = resolve_program(&request.guest.program)?;
    let isa = isa_of_elf(&program)?;
    let launch = &mut request.guest.launch;
    launch.sysroot = sysroot::find(&program, isa, launch.sysroot.as_deref())?;
    let launch = &request.guest.launch;
    let qemu = match &launch.qemu {
        Some(q) if q.is_file() => q.clone(),
        Some(q) => {
            return Err(CollectError::QemuNotFound {
                name: q.display().to_string(),
            })
        }
        None => find_on_path(isa.qemu_name()).ok_or_else(|| CollectError::QemuNotFound {
            name: isa.qemu_name().into(),
        })?,
    };
    let api = plugin_api(&qemu)?;
    if request.counting.turns > 0 && api == PluginApi::V1 {
        // QEMU before 9.0 starts a thread's vCPU on its parent: the new thread has no moment
        // outside QEMU's execution loop in which to wait for the flush its parent does when
        // the first thread appears (see the plugin's turns.rs).
        return Err(CollectError::Unsupported {
            what: format!("{}: the deterministic schedule needs QEMU 9.1 or later (scripts/build-qemu builds QEMU 10; --qemu PATH)", qemu.display()),
        });
    }
    let plugin = find_plugin(launch.plugin.as_deref(), api)?;
    if let Some(cpu) = &launch.cpu {
        qemu::check_cpu(&qemu, cpu)?;
    }
    Ok(Prepared {
        request,
        program,
        isa,
        qemu,
        plugin,
        api,
        output: None,
    })
}

/// How the guest ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestStatus {
    /// It exited with this status.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

impl GuestStatus {
    /// The status a shell would report: the exit status, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            GuestStatus::Exited(c) => c,
            GuestStatus::Signaled(s) => 128 + s,
        }
    }
}

/// One guest thread's results.
#[derive(Debug)]
pub struct ThreadResult {
    /// 1 = main thread, then in creation order.
    pub number: u32,
    /// The vector file (in the work directory), unless counting only.
    pub bb: Option<PathBuf>,
    /// The closing comment block (exp-bbv's totals).
    pub summary: String,
    /// Instructions executed.
    pub instructions: u64,
    /// Intervals written.
    pub intervals: u64,
    /// The blocks run after each cut (`thread.N.marks`), when watched.
    pub marks: Option<PathBuf>,
    /// The thread's vector per slice (`thread.N.slices`), when slices were recorded.
    pub slices: Option<PathBuf>,
}

/// What a finished collection produced.
#[derive(Debug)]
pub struct Collected {
    /// Keeps the work directory alive until the caller has moved the files out.
    pub dir: tempfile::TempDir,
    /// Removes `dir` if bbv is killed (after `dir`, which removes it otherwise).
    _cleanup: interrupt::Cleanup,
    /// Threads in number order.
    pub threads: Vec<ThreadResult>,
    /// Every block, by id.
    pub blocks: Vec<Block>,
    /// The files blocks came from ([`Block::image`] indexes this).
    pub images: Vec<Image>,
    /// The slice boundaries (`slices`), when a second thread ran with slices asked for.
    pub slices: Option<PathBuf>,
    /// The per-interval metrics (`metrics`), when asked for.
    pub metrics: Option<PathBuf>,
}

/// What one capture (`checkpoint=FILE`, at a marker event) left in the plugin's folder.
#[derive(Clone, Debug)]
pub struct CaptureFiles {
    /// The registers, mappings and kernel-visible state.
    pub state: PathBuf,
    /// The guest's standard input as the plugin kept it, when it was a stream.
    pub stdin: Option<PathBuf>,
    dir: PathBuf,
    event: u32,
}

impl CaptureFiles {
    /// The bytes of descriptor `fd` the capture copied.
    pub fn copied(&self, fd: i32) -> PathBuf {
        self.dir.join(files::checkpoint_file(self.event, fd))
    }
}

impl Collected {
    /// The capture at marker event `event`, None when the event never came (the marker was
    /// not reached).
    pub fn capture(&self, event: u32) -> Option<CaptureFiles> {
        let dir = self.dir.path();
        let state = dir.join(files::checkpoint_state(event));
        let stdin = dir.join(files::STDIN);
        state.exists().then(|| CaptureFiles {
            state,
            stdin: stdin.exists().then_some(stdin),
            dir: dir.to_path_buf(),
            event,
        })
    }

    /// The guest address of every marker a checkpointing replay reached
    /// (`checkpoint.markers`: one `MARKER HEX` line each; may not exist).
    pub fn checkpoint_markers(&self) -> PathBuf {
        self.dir.path().join(files::CHECKPOINT_MARKERS)
    }

    /// Thread 1's system calls among the marker events (`syscalls=on`; may not exist).
    pub fn syscalls(&self) -> PathBuf {
        self.dir.path().join(files::SYSCALLS)
    }

    /// The marker events a replay's plugin wrote ([`Request::counting`]'s `markers`).
    pub fn events(&self) -> Result<Events, CollectError> {
        let path = self.dir.path().join(files::EVENTS);
        Ok(bbv_plugin_contract::events::read_events(&path)?)
    }

    /// What a run with deterministic turns could not follow, one event per line (empty: the
    /// order followed the guest alone). The plugin writes at most about a hundred lines.
    pub fn schedule_events(&self) -> Result<Vec<String>, CollectError> {
        let path = self.dir.path().join(files::SCHEDULE);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let text = bbv_files::input::read_bytes(&path, 1 << 20)
            .map_err(|e| CollectError::Incomplete(e.to_string()))?;
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .map(String::from)
            .collect())
    }

    /// The per-interval metrics, one row per vector of thread 1. Rows past thread 1's last
    /// vector (other threads' work after its last cut) are dropped as the vectors drop it.
    pub fn metrics_rows(&self) -> Result<Option<Vec<bbv_profile::MetricsRow>>, CollectError> {
        let Some(path) = &self.metrics else {
            return Ok(None);
        };
        let mut rows = bbv_profile::read_metrics(path).map_err(CollectError::Metrics)?;
        let want = self.threads.first().map_or(0, |t| t.intervals) as usize;
        if rows.len() < want {
            return Err(CollectError::Incomplete(format!(
                "the metrics have {} rows for {want} intervals: the guest ended without running the plugin's exit (killed by a signal?), so the last interval's metrics were never written",
                rows.len()
            )));
        }
        rows.truncate(want);
        Ok(Some(rows))
    }

    /// Every row of the metrics, as written: one per slice when they were cut at slices
    /// ([`CacheModel::slice_rows`] and a second thread ran), which the caller matches against
    /// the slices it builds.
    pub fn metrics_rows_all(&self) -> Result<Option<Vec<bbv_profile::MetricsRow>>, CollectError> {
        self.metrics
            .as_ref()
            .map(|path| bbv_profile::read_metrics(path).map_err(CollectError::Metrics))
            .transpose()
    }
}

/// The guest's end and, if the plugin completed its files, what it collected.
#[derive(Debug)]
pub struct Outcome {
    /// The guest's process id (QEMU's, which is the guest's in user mode).
    pub pid: u32,
    /// How the guest ended.
    pub status: GuestStatus,
    /// The results.
    pub collected: Result<Collected, CollectError>,
}

impl Prepared {
    /// The full QEMU command line (for messages).
    pub fn command_line(&self, dir: &Path) -> Vec<OsString> {
        let r = &self.request;
        let mut counting = r.counting.clone();
        // Slices, flow control and turns are what the exclusions apply to.
        if counting.slices == 0 && counting.flow == 0 && counting.turns == 0 {
            counting.exclude.clear();
        }
        counting.dir = dir.to_path_buf();
        let mut plugin = OsString::from(&self.plugin);
        for arg in counting.to_args() {
            plugin.push(",");
            plugin.push(arg);
        }
        let mut v = vec![self.qemu.clone().into_os_string()];
        if let Some(cpu) = &r.guest.launch.cpu {
            v.extend(["-cpu".into(), cpu.into()]);
        }
        if let Some(root) = &r.guest.launch.sysroot {
            v.extend(["-L".into(), root.into()]);
        }
        v.extend(["-plugin".into(), plugin]);
        // bbv's own settings (BBV_*) are not the guest's: a run with one and its replay
        // without would start from stacks of other sizes, and so count other instructions.
        for (name, _) in std::env::vars_os() {
            if name.as_encoded_bytes().starts_with(b"BBV_") {
                v.extend(["-U".into(), name]);
            }
        }
        v.push("--".into());
        v.push(self.program.clone().into_os_string());
        v.extend(r.guest.args.iter().cloned());
        v
    }

    /// Runs the guest to completion and reads the plugin's results.
    pub fn run(self) -> Result<Outcome, CollectError> {
        self.run_watched(None)
    }

    /// [`Prepared::run`], telling `watcher` how far the guest got about every
    /// [`PROGRESS_PERIOD`] while it runs.
    pub fn run_watched(self, watcher: Option<&dyn Watcher>) -> Result<Outcome, CollectError> {
        let work = &self.request.work_dir;
        interrupt::remove_orphans(work, ".bbv-collect-");
        let prefix = interrupt::tagged(".bbv-collect-");
        let temp = |base: Option<&Path>| {
            let b = tempfile::Builder::new().prefix(&prefix).to_owned();
            let dir = match base {
                Some(w) => b.clone().tempdir_in(w),
                None => b.clone().tempdir(),
            }?;
            let path = dir.path().to_path_buf();
            Ok((dir, path))
        };
        let (mut dir, mut cleanup) = interrupt::Cleanup::create(|| temp(Some(work)))
            .map_err(|e| CollectError::io(work, e))?;
        // QEMU splits plugin arguments at commas; a path with one cannot be passed.
        if dir.path().as_os_str().to_string_lossy().contains(',') {
            (dir, cleanup) = interrupt::Cleanup::create(|| temp(None))
                .map_err(|e| CollectError::io(std::env::temp_dir(), e))?;
        }
        let argv = self.command_line(dir.path());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        if let Some(path) = &self.output {
            let file = std::fs::File::create(path).map_err(|e| CollectError::io(path, e))?;
            let again = file.try_clone().map_err(|e| CollectError::io(path, e))?;
            cmd.stdout(file).stderr(again);
        }
        let waited = interrupt::spawn(&mut cmd).and_then(|mut child| {
            // Like system(3): a terminal's ^C goes to the guest, which decides; we wait for
            // it. Ignored only once QEMU runs, so that the guest starts with the dispositions
            // bbv got (an ignored SIGQUIT changed the shell's start-up by an instruction).
            // Where `interrupt` is installed SIGINT is blocked and waited for instead: an
            // ignored signal would never arrive.
            let ignored: &[libc::c_int] = if interrupt::installed() {
                &[libc::SIGQUIT]
            } else {
                &[libc::SIGINT, libc::SIGQUIT]
            };
            // SAFETY: plain disposition changes, restored below.
            let saved: Vec<_> = ignored
                .iter()
                .map(|&s| (s, unsafe { libc::signal(s, libc::SIG_IGN) }))
                .collect();
            let pid = child.id();
            let ended = match watcher {
                None => interrupt::ended(pid, true).map(drop),
                Some(w) => watch(pid, dir.path(), w),
            };
            for (s, old) in saved {
                // SAFETY: as above.
                unsafe { libc::signal(s, old) };
            }
            ended?;
            Ok((pid, child.wait()?))
        });
        let (pid, status) = waited.map_err(|e| CollectError::io(&self.qemu, e))?;
        if let Some(sig) = interrupt::received() {
            return Err(CollectError::Interrupted(sig));
        }
        use std::os::unix::process::ExitStatusExt;
        let status = match (status.code(), status.signal()) {
            (Some(c), _) => GuestStatus::Exited(c),
            (None, Some(s)) => GuestStatus::Signaled(s),
            _ => GuestStatus::Exited(255),
        };
        let collected =
            read_results(dir, cleanup, status, &self.program, &self.request).map_err(|e| {
                match (e, &self.output) {
                    // QEMU's message went to the file its output was captured in, not above.
                    (CollectError::Incomplete(m), Some(out)) => {
                        CollectError::Incomplete(m.replace(
                            "its reason is in the message above",
                            &format!("QEMU said (in {}): {}", out.display(), last_lines(out)),
                        ))
                    }
                    (e, _) => e,
                }
            });
        Ok(Outcome {
            pid,
            status,
            collected,
        })
    }
}

/// How often [`Prepared::run_watched`] looks at the plugin's state.
pub const PROGRESS_PERIOD: std::time::Duration = std::time::Duration::from_millis(250);

/// How far a running guest got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Instructions of every thread so far (each thread's as of its latest cut: the plugin
    /// publishes a single-threaded guest's count once per interval).
    pub instructions: u64,
    /// Intervals thread 1 completed.
    pub intervals: u64,
    /// Threads started so far.
    pub threads: u32,
}

/// Told a running guest's [`Progress`].
pub trait Watcher {
    /// Called about every [`PROGRESS_PERIOD`] while the guest runs.
    fn progress(&self, p: &Progress);
}

/// Waits for QEMU, reporting the plugin's counts meanwhile.
fn watch(pid: u32, dir: &Path, w: &dyn Watcher) -> std::io::Result<()> {
    // Short sleeps between checks of the child, so that the end of the guest is not delayed
    // by a whole period.
    let mut next = std::time::Instant::now();
    loop {
        if interrupt::ended(pid, false)? {
            return Ok(());
        }
        if std::time::Instant::now() >= next {
            w.progress(&state::progress(dir));
            next = std::time::Instant::now() + PROGRESS_PERIOD;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The last lines of a captured output (at most 3), for a message.
fn last_lines(path: &Path) -> String {
    match bbv_files::input::last_lines(path, 3) {
        l if l.is_empty() => "nothing".into(),
        l => l.join(" | "),
    }
}

fn read_results(
    dir: tempfile::TempDir,
    cleanup: interrupt::Cleanup,
    status: GuestStatus,
    program: &Path,
    request: &Request,
) -> Result<Collected, CollectError> {
    let d = dir.path();
    if let Ok(msg) = std::fs::read_to_string(d.join(files::ERROR)) {
        return Err(CollectError::Plugin(msg));
    }
    let table = d.join(files::BLOCKS);
    if !table.exists() {
        return Err(CollectError::Incomplete(format!(
            "QEMU stopped (status {}) before loading the plugin; its reason is in the message above",
            status.code()
        )));
    }
    let (blocks, images) = table::read_blocks(&table)?;
    if blocks.is_empty() {
        // QEMU exits through its own exit path when it cannot load the program.
        return Err(CollectError::Incomplete(format!(
            "QEMU stopped (exit status {}) before {} ran a single instruction; its reason is in the message above",
            status.code(),
            program.display()
        )));
    }
    let mut threads = Vec::new();
    let entries = std::fs::read_dir(d).map_err(|e| CollectError::io(d, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CollectError::io(d, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(number) = files::state_thread(&name) else {
            continue;
        };
        threads.push(state::finish_thread(d, number, request)?);
    }
    threads.sort_by_key(|t| t.number);
    let slices = Some(d.join(files::SLICES)).filter(|p| p.exists());
    let metrics = Some(d.join(files::METRICS)).filter(|p| p.exists());
    if request.counting.metrics.is_some() && metrics.is_none() {
        return Err(CollectError::Incomplete(
            "the plugin wrote no metrics file".into(),
        ));
    }
    Ok(Collected {
        dir,
        _cleanup: cleanup,
        threads,
        blocks,
        images,
        slices,
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_from_its_command_line() {
        let launch = Launch {
            cpu: Some("Haswell".into()),
            ..Default::default()
        };
        let g = Guest::from_command(&["gzip".into(), "-9".into()], launch.clone()).unwrap();
        assert_eq!(g.program, "gzip");
        assert_eq!(g.args, [OsString::from("-9")]);
        assert_eq!(g.launch, launch);
        assert_eq!(
            Guest::from_command(&[], Launch::default()).unwrap_err(),
            "no program given"
        );
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(vec![b'a', 0xff]);
        let e = Guest::from_command(&[odd], Launch::default()).unwrap_err();
        assert!(e.ends_with(": program name is not UTF-8"), "{e}");
    }
}
