//! One live simulation: Sniper started on FIFOs that bbv writes and reads.

use std::ffi::CString;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bbv_sift::watch::running;
use bbv_sift::Writer;

use crate::{SimOut, Sniper, SniperError};

/// How long Sniper may take to start reading its first stream.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// A simulation in progress.
pub struct Live {
    child: Option<Child>,
    dir: PathBuf,
    prefix: PathBuf,
    log: PathBuf,
    /// The figures are those from the stream's marker to the region of interest's end.
    from_marker: bool,
    /// Sniper's tools (the partial report's generator).
    tools: PathBuf,
}

/// Sniper's replies to one thread's stream; reading waits for them as long as Sniper runs.
pub struct Replies {
    file: File,
    pid: i32,
    log: PathBuf,
}

fn mkfifo(path: &Path) -> Result<(), SniperError> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SniperError::Missing(format!("{}: a NUL in the name", path.display())))?;
    // SAFETY: a valid C string.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(SniperError::io(format!(
            "cannot make the FIFO {}",
            path.display()
        ))(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Writes Sniper script `name` (`name.py`) into Sniper's folder `dir`.
fn write_script(dir: &Path, name: &str, text: &str) -> Result<(), SniperError> {
    let path = dir.join(format!("{name}.py"));
    std::fs::write(&path, text).map_err(SniperError::io(format!("cannot write {}", path.display())))
}

/// Opens `path` with `flags`, then clears O_NONBLOCK (kept only for the open).
fn open_fd(path: &Path, flags: i32) -> std::io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a valid C string; the descriptor is owned by the File made from it.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is ours and open.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        Ok(File::from_raw_fd(fd))
    }
}

/// The guard script's name (guard.py, written to Sniper's folder): the simulator dies with
/// run-sniper, which dies with bbv.
const GUARD_SCRIPT: &str = "bbv_guard";

/// The region script's name (region.py, written to Sniper's folder) and its snapshots.
const REGION_SCRIPT: &str = "bbv_region";
const REGION_START: &str = "bbv-region-start";
const REGION_END: &str = "bbv-region-end";

impl Sniper {
    /// Starts Sniper with `cores` cores on one application whose thread 0 bbv will stream, in
    /// `work` (an empty folder: the FIFOs, Sniper's output folder `out` and its log
    /// `sniper.log` go there); `config`: one of Sniper's configurations instead of its
    /// default (`gainestown`), e.g. `cortex-a72` for AArch64 streams.
    pub fn start(
        &self,
        work: &Path,
        cores: usize,
        config: Option<&str>,
    ) -> Result<Live, SniperError> {
        self.launch(work, cores, config, false)
    }

    /// [`start`](Self::start) for a stream whose region of interest begins before the part
    /// measured, a region bounded by [`bbv_sift::command::region`]'s commands: bbv's region
    /// script (region.py) counts them as Sniper simulates them and records the statistics at
    /// the region's bounds; the figures ([`Live::finish`]) are those between the two.
    pub fn start_from_marker(
        &self,
        work: &Path,
        cores: usize,
        config: Option<&str>,
    ) -> Result<Live, SniperError> {
        self.launch(work, cores, config, true)
    }

    fn launch(
        &self,
        work: &Path,
        cores: usize,
        config: Option<&str>,
        from_marker: bool,
    ) -> Result<Live, SniperError> {
        let dir = std::path::absolute(work).map_err(SniperError::io("cannot name the folder"))?;
        let prefix = dir.join("t");
        let mut live = Live {
            child: None,
            log: dir.join("sniper.log"),
            prefix,
            dir,
            from_marker,
            tools: self.root.join("tools"),
        };
        mkfifo(&live.fifo(0, false))?;
        mkfifo(&live.fifo(0, true))?;
        let log = File::create(&live.log).map_err(SniperError::io(format!(
            "cannot write {}",
            live.log.display()
        )))?;
        let err = log
            .try_clone()
            .map_err(SniperError::io("cannot share the log"))?;
        let mut cmd = Command::new(self.root.join("run-sniper"));
        if let Some(c) = config {
            cmd.args(["-c", c]);
        }
        // Scripts are found in Sniper's folder (the working directory), whatever the path
        // holds; the guard first, so that no later failure leaves the simulator behind.
        write_script(&live.dir, GUARD_SCRIPT, include_str!("guard.py"))?;
        cmd.args(["-s", GUARD_SCRIPT]);
        if from_marker {
            write_script(&live.dir, REGION_SCRIPT, include_str!("region.py"))?;
            use bbv_sift::command::region as r;
            cmd.arg("-s").arg(format!(
                "{REGION_SCRIPT}:{}:{}:{}:{}:{}:{REGION_START}:{REGION_END}",
                r::START_AFTER,
                r::END_AFTER,
                r::HIT,
                r::HIT_START,
                r::HIT_END,
            ));
        }
        cmd.arg("-n")
            .arg(cores.to_string())
            .arg("-d")
            .arg(live.dir.join("out"))
            // Detailed simulation between the stream's region-of-interest magic instructions;
            // before them caches and predictors are warmed, after them Sniper runs ahead.
            .arg("--roi")
            .arg("--trace-manual")
            .args(["-g", "traceinput/enabled=true"])
            .args(["-g", "traceinput/emulate_syscalls=false"])
            .args(["-g", "traceinput/num_apps=1"])
            // Sniper gives up on a stream not opened within its timeout (6 minutes by
            // default): a region late in a long replay opens its stream after hours. bbv
            // ends a Sniper whose stream never comes itself (`release`).
            .args(["-g", "traceinput/timeout=1000000000"])
            .arg("-g")
            .arg(format!("traceinput/trace_prefix={}", live.prefix.display()))
            .current_dir(&live.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            // Its own process group: run-sniper starts the backend as a child of its own,
            // and both go when the simulation is dropped unfinished.
            .process_group(0);
        bbv_files::interrupt::dies_with_bbv(&mut cmd);
        let child = cmd.spawn().map_err(SniperError::io(format!(
            "cannot start {}",
            self.root.join("run-sniper").display()
        )))?;
        live.child = Some(child);
        Ok(live)
    }
}

impl Live {
    /// Sniper's FIFO for thread `thread` of application 0 (its replies when `response`): what
    /// another process (QEMU's plugin) writes and reads when it streams that thread.
    pub fn fifo(&self, thread: u64, response: bool) -> PathBuf {
        bbv_sift::relay::fifo(&self.prefix, thread, response)
    }

    /// The FIFOs' common prefix (`traceinput/trace_prefix`): what a multi-threaded frontend
    /// ([`bbv_sift::relay::Session`]) names every thread's FIFOs from.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The folder Sniper works in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// run-sniper's process id (0 once it ended).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    fn failed(&self, why: String) -> SniperError {
        SniperError::Failed {
            why,
            log: self.log.clone(),
        }
    }

    /// Thread 0's stream (once Sniper opened it) and Sniper's replies to it.
    pub fn thread0(&mut self) -> Result<(Writer<BufWriter<File>>, Replies), SniperError> {
        let path = self.fifo(0, false);
        let start = Instant::now();
        // Opening a FIFO to write waits for its reader: without blocking, so that a Sniper that
        // died on start-up is seen instead of waited for.
        let file = loop {
            match open_fd(&path, libc::O_WRONLY | libc::O_NONBLOCK) {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(e) => {
                    return Err(SniperError::io(format!("cannot open {}", path.display()))(
                        e,
                    ))
                }
            }
            if !running(self.pid()) {
                return Err(self.failed("it ended before it read the stream".into()));
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(self.failed(format!(
                    "it did not open its stream within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Read and write: the open never waits, and reads wait for replies instead of seeing
        // an end before Sniper opened its side ([`Replies`] checks Sniper still runs).
        let reply_path = self.fifo(0, true);
        let replies = open_fd(&reply_path, libc::O_RDWR).map_err(SniperError::io(format!(
            "cannot open {}",
            reply_path.display()
        )))?;
        let writer = Writer::new(BufWriter::with_capacity(1 << 16, file))?;
        Ok((
            writer,
            Replies {
                file: replies,
                pid: self.pid(),
                log: self.log.clone(),
            },
        ))
    }

    /// Lets a Sniper still waiting for thread 0's stream (its writer never came) see it end,
    /// so that [`finish`](Self::finish) does not wait forever; nothing happens to one that
    /// read its stream. A Sniper slow to start has not opened its side yet: this waits for it
    /// to (or to end). Likewise every other thread's stream Sniper made and is waiting for
    /// (a replay whose QEMU was killed before its relays opened them).
    pub fn release(&self) {
        for t in (1..).take_while(|&t| self.fifo(t, false).exists()) {
            if let Ok(f) = open_fd(&self.fifo(t, false), libc::O_WRONLY | libc::O_NONBLOCK) {
                drop(f);
            }
        }
        let start = Instant::now();
        loop {
            match open_fd(&self.fifo(0, false), libc::O_WRONLY | libc::O_NONBLOCK) {
                Ok(f) => return drop(f),
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(_) => return,
            }
            if !running(self.pid()) || start.elapsed() > START_TIMEOUT {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for Sniper to end (the stream must have been ended and dropped) and reads its
    /// report, with the CPU time its processes used.
    pub fn finish(mut self) -> Result<SimOut, SniperError> {
        let Some(child) = self.child.take() else {
            return Err(self.failed("not started".into()));
        };
        let waited = crate::wait::wait(child, crate::STALL)
            .map_err(SniperError::io("cannot wait for Sniper"))?;
        let cpu = waited.cpu;
        let Some(status) = waited.status else {
            return Err(self.failed(format!(
                "it used no CPU for {} s after its streams ended, its simulated threads \
                 waiting for one another (streams cut short?), and was stopped: {}",
                crate::STALL.as_secs(),
                self.log_tail()
            )));
        };
        // Once the region script recorded the region's end, Sniper's own summary as it
        // leaves (which fails when its region of interest began late in the stream, a
        // division by a zero time) is not the region's: the two snapshots are.
        // Sniper has ended: its log is read once, whole.
        let log = self.log_text();
        let reached = reached(&log);
        let ended = self.from_marker && reached.1;
        // Sniper's crash handler leaves run-sniper's status 0: its log says it.
        if !ended {
            if let Some(why) = crash(&log) {
                return Err(self.failed(why));
            }
        }
        if !status.success() && !ended {
            return Err(self.failed(format!("{status}: {}", self.log_tail())));
        }
        let report = match self.from_marker {
            true => self.partial_report(reached)?,
            false => self.dir.join("out/sim.out"),
        };
        let mut out = SimOut::read(&report, &self.log).map_err(|e| match e {
            SniperError::Failed { why, log } => SniperError::Failed {
                why: format!("{why}; {}", self.log_tail()),
                log,
            },
            e => e,
        })?;
        out.cpu_seconds = Some(cpu);
        Ok(out)
    }

    /// Sniper's report between the region script's two snapshots (its own tool reads them from
    /// its statistics database), written next to `sim.out`; `reached`: which bounds the
    /// region script logged ([`reached`]).
    fn partial_report(&self, reached: (bool, bool)) -> Result<PathBuf, SniperError> {
        let out = self.dir.join("out");
        let path = out.join("sim.region.out");
        let file = File::create(&path)
            .map_err(SniperError::io(format!("cannot write {}", path.display())))?;
        let status = Command::new(self.tools.join("gen_simout.py"))
            .arg("-d")
            .arg(&out)
            .arg(format!("--partial={REGION_START}:{REGION_END}"))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .status()
            .map_err(SniperError::io("cannot run Sniper's gen_simout.py"))?;
        if !status.success() {
            return Err(self.failed(format!(
                "its gen_simout.py failed ({status}) on the region's statistics"
            )));
        }
        // The region script logs each bound it records (the tool exits 0 when a snapshot is
        // missing, saying only the first it looked for).
        let why = match reached {
            (true, true) => return Ok(path),
            (false, true) => {
                "Sniper reached the region's end before its start: the end \
                 marker's executions came first in Sniper's order, its threads keeping other \
                 relative paces than under QEMU's turns (docs/sniper.md)"
            }
            (true, false) => {
                "Sniper never reached the region's end: its threads had not run \
                 the end marker's count when the streams stopped (docs/sniper.md)"
            }
            (false, false) => {
                "Sniper reached neither the region's start nor its end: its \
                 threads had not run the start marker's count when the streams stopped \
                 (docs/sniper.md)"
            }
        };
        Err(self.failed(why.into()))
    }

    /// Sniper's log (its first 64 MiB), what is not UTF-8 replaced.
    fn log_text(&self) -> String {
        let log = bbv_files::input::read_bytes(&self.log, 64 << 20).unwrap_or_default();
        String::from_utf8_lossy(&log).into_owned()
    }

    /// The last lines of Sniper's log, for a message.
    fn log_tail(&self) -> String {
        (bbv_files::input::last_lines(&self.log, 3).iter())
            .map(|l| bbv_files::input::quote(l.as_bytes()))
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

/// Whether the region script logged reaching the region's start and its end in Sniper's
/// `log` (a line of its own each, though Sniper's output, which shares the log, may cut into
/// the line before it).
fn reached(log: &str) -> (bool, bool) {
    let logged = |name: &str| log.contains(&format!("[BBV] {name}\n"));
    (logged(REGION_START), logged(REGION_END))
}

/// What Sniper's log says of a crash: its exception handler's line (after the failed
/// assertion that raised it, if one did) and the first frames of the backtrace run-sniper
/// prints, that a report can name where it crashed.
fn crash(log: &str) -> Option<String> {
    const EXCEPTION: &str = "[SNIPER] Internal exception: ";
    let at = log.find(EXCEPTION)?;
    let assertion = (log[..at].lines().rev())
        .find(|l| l.contains("Assertion") && l.contains("failed"))
        .map(|l| format!("{}; ", l.trim()));
    let rest = &log[at + EXCEPTION.len()..];
    let what = assertion.unwrap_or_default() + rest.lines().next().unwrap_or_default().trim();
    let frames: Vec<&str> = (rest.split_once("Backtrace:").map(|(_, b)| b))
        .into_iter()
        .flat_map(str::lines)
        .map(str::trim)
        .take_while(|l| !l.starts_with("---"))
        .filter(|l| !l.is_empty() && !l.starts_with("??"))
        .take(3)
        .collect();
    Some(match frames.is_empty() {
        true => format!("it crashed: {what}"),
        false => format!("it crashed: {what}, in {}", frames.join(" < ")),
    })
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: the group Sniper was started in (its id is the child's).
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

impl Read for Replies {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        loop {
            let mut p = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 200) };
            if n > 0 {
                return self.file.read(buf);
            }
            if !running(self.pid) {
                return Err(std::io::Error::other(format!(
                    "Sniper ended without replying (its log: {})",
                    self.log.display()
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::crash;

    #[test]
    fn a_crash_is_read_from_sniper_s_log_with_where_it_happened() {
        // Sniper's log as a crash at its start left it (the exit test, 2026-11-30).
        let log = "[SNIPER] Setting instrumentation mode to DETAILED\n\n\
            [SNIPER] Internal exception: Segmentation fault. Access Address = 0xa\n\n\
            [SNIPER] End\n[SNIPER] Elapsed time: 0.36 seconds\n\
            ------------------------------------------------------------\n\
            Segmentation fault. Access Address = 0xa\n\nBacktrace:\n\
            \x20   trace_thread.cc:TraceThread::spawn:864\n\
            \x20   trace_manager.cc:TraceManager::start:256\n\
            \x20   ??:??:0\n\
            \x20   trace_manager.cc:TraceManager::run:291\n\
            \x20   config.hpp:config::Config::getInt:122\n\
            ------------------------------------------------------------\n";
        assert_eq!(
            crash(log).unwrap(),
            "it crashed: Segmentation fault. Access Address = 0xa, in \
             trace_thread.cc:TraceThread::spawn:864 < trace_manager.cc:TraceManager::start:256 \
             < trace_manager.cc:TraceManager::run:291"
        );
        // A failed assertion, without the backtrace (cut short): the assertion named.
        let cut = "x\nsniper: arm_decoder.cc:103: f: Assertion `res' failed.\n\
            [SNIPER] Internal exception: Aborted. Access Address = 0x3e8\n";
        assert_eq!(
            crash(cut).unwrap(),
            "it crashed: sniper: arm_decoder.cc:103: f: Assertion `res' failed.; \
             Aborted. Access Address = 0x3e8"
        );
        // A run that ended well says nothing of the kind.
        assert_eq!(crash("[SNIPER] Start\n[SNIPER] End\n"), None);
    }
}
