//! A region's system calls, as the profile's replay made them (`region-R.syscalls`, written by
//! `bbv checkpoint`) and as its checkpoint makes them under `--check`, compared call by call.
//! Numbers are x86-64's (checkpoints are of x86-64 guests).

use std::fmt::Write as _;
use std::path::Path;

use bbv_plugin_contract::syscalls::{Call, Entry, Window};
use bbv_plugin_contract::sysno::{self, x86_64, Syscall};
use serde::Serialize;

use crate::ReplayError;

/// Calls kept per region: a region that makes more is compared over its first ones.
pub const CAP: usize = 200_000;

/// The kernel's return from a signal handler: the checkpoint's own SIGTRAP handler makes one
/// per end-marker execution before the last, so none are compared.
pub const RT_SIGRETURN: i64 = x86_64::RT_SIGRETURN;

/// What the table says of call `nr` (nothing for a call it does not list).
fn known(nr: i64) -> Syscall {
    sysno::x86_64(nr).copied().unwrap_or(Syscall {
        nr,
        name: "",
        fd_first: false,
        returns_fd: false,
        outcome_only: false,
    })
}

/// A call's name.
pub fn name(nr: i64) -> String {
    match sysno::x86_64(nr) {
        Some(s) => s.name.to_string(),
        None => format!("syscall {nr}"),
    }
}

/// brk(0) asks for the break; brk(addr) succeeded when it returned addr.
fn succeeded(c: &Call) -> bool {
    match c.nr {
        x86_64::BRK => c.arg0 == 0 || c.ret as u64 == c.arg0,
        _ => c.ret >= 0 || c.ret < -4095,
    }
}

/// Descriptor numbers of the profile's run against the checkpoint's: those open at the
/// capture are the same (the checkpoint recreates them at their numbers); one made in the
/// region may have another number (the lowest free, which QEMU's own descriptors decide),
/// paired from the call that returned it or, for those a call writes into memory (pipe,
/// socketpair), from its first use.
struct Fds {
    open: Vec<u64>,
    pairs: std::collections::HashMap<u64, u64>,
}

impl Fds {
    /// Whether the checkpoint's `here` is the profile's `want`.
    fn matches(&mut self, want: u64, here: u64) -> bool {
        if let Some(&p) = self.pairs.get(&want) {
            return p == here;
        }
        if self.open.contains(&want) {
            return want == here;
        }
        if self.open.contains(&here) || self.pairs.values().any(|&v| v == here) {
            return false;
        }
        self.pairs.insert(want, here);
        true
    }

    /// What a call that succeeded in both runs did to the numbering.
    fn after(&mut self, want: &Call, here: &Call) {
        if known(want.nr).returns_fd {
            self.pairs.insert(want.ret as u64, here.ret as u64);
        } else if want.nr == x86_64::CLOSE {
            self.pairs.remove(&want.arg0);
            self.open.retain(|&f| f != want.arg0);
        }
    }
}

/// Whether the checkpoint's call `here` is the profile's `want` again.
fn same(want: &Call, here: &Call, fds: &mut Fds) -> bool {
    let call = known(want.nr);
    want.nr == here.nr
        && (!call.fd_first || fds.matches(want.arg0, here.arg0))
        && match call.outcome_only || call.returns_fd {
            true => succeeded(want) == succeeded(here),
            false => want.ret == here.ret,
        }
}

/// `read(3) = 4096`, `brk(0x55d0c000) failed (0x55d0a000)`.
fn describe(c: &Call) -> String {
    let arg = match known(c.nr).fd_first {
        true => c.arg0.to_string(),
        false => format!("{:#x}", c.arg0),
    };
    let ret = match (succeeded(c), c.nr) {
        (false, x86_64::BRK) => format!("failed ({:#x})", c.ret),
        (false, _) => format!("= -{} (error)", -c.ret),
        (true, x86_64::MMAP | x86_64::BRK | x86_64::MREMAP) => format!("= {:#x}", c.ret),
        (true, _) => format!("= {}", c.ret),
    };
    format!("{}({arg}) {ret}", name(c.nr))
}

/// How a checkpoint's calls compare with the profile's.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CallsCheck {
    /// The region's calls in the profile (from the checkpoint's start to the region's end).
    pub profile: u64,
    /// The same in the checkpoint's run.
    pub checkpoint: u64,
    /// The first that differs, said in words; none when every call compared is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<String>,
    /// Of the calls compared, the mmap and mremap that returned another address than in the
    /// profile (QEMU places a mapping by the host's randomized layout): code whose work
    /// depends on addresses (an allocator's, a hash of pointers) may run a little differently.
    pub other_addresses: u64,
}

impl CallsCheck {
    /// Every call the same.
    pub fn same(&self) -> bool {
        self.first_difference.is_none()
    }
}

/// Compares the checkpoint's calls with the profile's, in order; `open` are the descriptors
/// open at the capture.
pub fn compare(profile: &Window, open: &[u64], here: &Window) -> CallsCheck {
    let mut fds = Fds {
        open: open.to_vec(),
        pairs: Default::default(),
    };
    let (mut first, mut other_addresses) = (None, 0);
    for (i, (w, h)) in profile.calls.iter().zip(&here.calls).enumerate() {
        if !same(w, h, &mut fds) {
            first = Some(format!(
                "call {} of the region: {} in the profile, {} here",
                i + 1,
                describe(w),
                describe(h)
            ));
            break;
        }
        if succeeded(w) {
            fds.after(w, h);
        }
        if matches!(w.nr, x86_64::MMAP | x86_64::MREMAP) && w.ret != h.ret {
            other_addresses += 1;
        }
    }
    if first.is_none() && profile.total != here.total {
        let n = profile.calls.len().min(here.calls.len());
        let next = |w: &Window| w.calls.get(n).map_or("none".into(), describe);
        first = Some(format!(
            "{} calls in the profile, {} here; call {}: {} in the profile, {} here",
            profile.total,
            here.total,
            n + 1,
            next(profile),
            next(here)
        ));
    }
    CallsCheck {
        profile: profile.total,
        checkpoint: here.total,
        first_difference: first,
        other_addresses,
    }
}

/// The program's calls of each window of the plugin's `log` ([`windows`]): at most [`CAP`]
/// each, the checkpoint's own rt_sigreturn calls (and so the program's) left out.
///
/// [`windows`]: bbv_plugin_contract::syscalls::windows
pub fn log_windows(
    log: &Path,
    wanted: &[(Vec<u32>, u32)],
) -> Result<Vec<Option<Window>>, ReplayError> {
    bbv_plugin_contract::syscalls::windows(log, wanted, CAP, |c| c.nr != RT_SIGRETURN)
        .map_err(|e| ReplayError::Invalid(e.to_string()))
}

/// Per region of `s`, the replay's calls (the plugin's log, `log`) from its capture (the
/// first of `events[r]` and its start, event 2r) to its end (event 2r + 1).
pub fn replay_windows(
    events: &[usize],
    s: &bbv_rundir::Summary,
    log: &Path,
) -> Result<Vec<Window>, ReplayError> {
    let wanted: Vec<(Vec<u32>, u32)> = (events.iter().enumerate())
        .map(|(r, &e)| (vec![e as u32, 2 * r as u32], 2 * r as u32 + 1))
        .collect();
    (log_windows(log, &wanted)?.into_iter().zip(&s.points))
        .map(|(w, p)| {
            w.ok_or_else(|| {
                ReplayError::Invalid(format!(
                    "{}: region {}'s capture or end is missing",
                    log.display(),
                    bbv_pipeline::regions::region_id(p)
                ))
            })
        })
        .collect()
}

/// Calls of the region on descriptors the checkpoint leaves closed: they will fail there.
pub fn unreproducible(w: &Window, closed: &[i32]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in w.calls.iter().filter(|c| known(c.nr).fd_first) {
        let fd = c.arg0 as i32;
        if closed.contains(&fd) {
            let line = format!(
                "the region calls {} on fd {fd}, which the checkpoint leaves closed: \
                 that call fails there",
                name(c.nr)
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// Writes a region's calls: `# open FD...` (the descriptors open at the capture), `# total N`
/// when more were made than kept, then `s NR ARG0 RET` lines (the plugin's format).
pub fn write(w: &Window, open: &[i32], out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut text = String::from("# open");
    for fd in open {
        let _ = write!(text, " {fd}");
    }
    text.push('\n');
    if w.total > w.calls.len() as u64 {
        let _ = writeln!(text, "# total {}", w.total);
    }
    for c in &w.calls {
        text += &Entry::Call(*c).line();
    }
    out.write_all(text.as_bytes())
}

/// Reads what [`write`] wrote: the calls and the descriptors open at the capture.
pub fn read(path: &Path) -> Result<(Window, Vec<u64>), ReplayError> {
    let text = bbv_files::input::read_text(path, 64 << 20)?;
    let (mut w, mut open, mut total) = (Window::default(), Vec::new(), None);
    for (i, line) in text.lines().enumerate() {
        let bad = || {
            ReplayError::Invalid(format!(
                "{}:{}: expected # open FD..., # total N or s NR ARG0 RET",
                path.display(),
                i + 1
            ))
        };
        if let Some(n) = line.strip_prefix("# total ") {
            total = Some(n.parse().map_err(|_| bad())?);
            continue;
        }
        if let Some(fds) = line.strip_prefix("# open") {
            open = (fds.split_whitespace())
                .map(|f| f.parse().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            continue;
        }
        match Entry::parse(line) {
            Some(Entry::Call(c)) => w.calls.push(c),
            _ => return Err(bad()),
        }
    }
    w.total = total.unwrap_or(w.calls.len() as u64);
    Ok((w, open))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(nr: i64, arg0: u64, ret: i64) -> Call {
        Call { nr, arg0, ret }
    }

    fn window(calls: Vec<Call>) -> Window {
        Window {
            total: calls.len() as u64,
            calls,
        }
    }

    #[test]
    fn calls_compare_by_what_matters_and_the_first_difference_is_named() {
        let profile = window(vec![
            call(0, 3, 4096),
            call(9, 0, 0x7f00_0000_0000),
            call(12, 0x5600_0000, 0x5600_0000),
            call(1, 1, 10),
        ]);
        // Another address from mmap is no difference; a failed brk is.
        let mut here = profile.clone();
        here.calls[1].ret = 0x7e00_0000_0000;
        let c = compare(&profile, &[0, 1, 3], &here);
        assert!(c.same() && c.other_addresses == 1, "{c:?}");
        here.calls[2].ret = 0x55ff_0000;
        let c = compare(&profile, &[0, 1, 3], &here);
        let said = c.first_difference.unwrap();
        assert!(
            said.starts_with("call 3 of the region: brk(0x56000000) = 0x56000000"),
            "{said}"
        );
        assert!(
            said.contains("brk(0x56000000) failed (0x55ff0000) here"),
            "{said}"
        );
        // Fewer calls.
        let short = window(profile.calls[..2].to_vec());
        let said = (compare(&profile, &[0, 1, 3], &short).first_difference).unwrap();
        assert!(
            said.starts_with("4 calls in the profile, 2 here; call 3: brk"),
            "{said}"
        );
        // Another descriptor.
        let mut other = profile.clone();
        other.calls[0].arg0 = 4;
        assert!(!compare(&profile, &[0, 1, 3, 4], &other).same());
        // A file opened in the region under another number, then read through it.
        let opened = window(vec![call(257, 0, 11), call(0, 11, 100), call(3, 11, 0)]);
        let mut renumbered = opened.clone();
        renumbered.calls[0].ret = 8;
        renumbered.calls[1].arg0 = 8;
        renumbered.calls[2].arg0 = 8;
        assert!(compare(&opened, &[0, 1], &renumbered).same());
        renumbered.calls[1].arg0 = 11;
        assert!(!compare(&opened, &[0, 1], &renumbered).same());
        // A pipe made in the region (its numbers written into memory): paired at first use,
        // never with a descriptor open at the capture.
        let piped = window(vec![call(22, 0x7ff0, 0), call(1, 12, 1), call(0, 11, 1)]);
        let mut here = piped.clone();
        here.calls[1].arg0 = 9;
        here.calls[2].arg0 = 8;
        assert!(compare(&piped, &[0, 1, 2], &here).same());
        here.calls[2].arg0 = 2;
        assert!(!compare(&piped, &[0, 1, 2], &here).same());
    }

    #[test]
    fn a_window_goes_there_and_back_and_closed_descriptors_are_named() {
        let w = Window {
            calls: vec![call(0, 5, -9), call(0, 5, -9), call(1, 1, 3)],
            total: 7,
        };
        let mut text = Vec::new();
        write(&w, &[0, 5], &mut text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("region-1.syscalls");
        std::fs::write(&p, &text).unwrap();
        assert_eq!(read(&p).unwrap(), (w.clone(), vec![0, 5]));
        std::fs::write(&p, "s 1 2 3\nnonsense\n").unwrap();
        assert!(read(&p).unwrap_err().to_string().contains(":2: expected"));
        let notes = unreproducible(&w, &[5]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("read on fd 5"), "{notes:?}");
    }
}
