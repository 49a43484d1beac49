//! Thread 1's system calls in order, among the replay's marker events (`syscalls=on`, the
//! plugin's `syscalls` file), so that `bbv checkpoint --check` can compare a checkpoint's calls
//! with the profiled run's call by call:
//!
//! ```text
//! e EVENT              marker event EVENT fired (before the marker instruction ran)
//! s NR ARG0 RET        system call NR (x86-64 numbers for x86-64 guests) with its first
//!                      argument returned RET (decimal; -errno on failure)
//! ```
//!
//! Calls that do not return (exit, exit_group, a successful execve) are not listed.

use std::io::BufRead;
use std::path::Path;

use crate::ContractError;

/// One line of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A marker event fired.
    Event(u32),
    /// A system call returned.
    Call(Call),
}

/// A system call that returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// Its number.
    pub nr: i64,
    /// Its first argument.
    pub arg0: u64,
    /// What it returned.
    pub ret: i64,
}

impl Entry {
    /// A line as the plugin writes it (a trailing newline allowed), or None.
    pub fn parse(line: &str) -> Option<Entry> {
        let f: Vec<&str> = line.trim_end().split(' ').collect();
        match f[..] {
            ["e", e] => e.parse().ok().map(Entry::Event),
            ["s", nr, a, ret] => Some(Entry::Call(Call {
                nr: nr.parse().ok()?,
                arg0: a.parse().ok()?,
                ret: ret.parse().ok()?,
            })),
            _ => None,
        }
    }

    /// The line the plugin writes.
    pub fn line(&self) -> String {
        match self {
            Entry::Event(e) => format!("e {e}\n"),
            Entry::Call(c) => format!("s {} {} {}\n", c.nr, c.arg0, c.ret),
        }
    }
}

/// The lines of a log, read one at a time, with their numbers; an unfinished last line (a
/// process killed while writing) is left out.
pub fn entries(
    path: &Path,
) -> Result<impl Iterator<Item = Result<Entry, ContractError>> + '_, ContractError> {
    let f = std::fs::File::open(path).map_err(|source| ContractError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut r = std::io::BufReader::new(f);
    let mut line = String::new();
    let mut n = 0;
    Ok(std::iter::from_fn(move || {
        line.clear();
        n += 1;
        match r.read_line(&mut line) {
            Err(source) => Some(Err(ContractError::Io {
                path: path.to_path_buf(),
                source,
            })),
            Ok(0) => None,
            Ok(_) if !line.ends_with('\n') => None,
            Ok(_) => Some(Entry::parse(&line).ok_or_else(|| ContractError::Parse {
                path: path.to_path_buf(),
                line: n,
                what: "e EVENT or s NR ARG0 RET".into(),
            })),
        }
    }))
}

/// The calls of one window of a log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// The first calls, up to the cap.
    pub calls: Vec<Call>,
    /// Every call in the window.
    pub total: u64,
}

/// Per window (the first of its start events, its end event): the calls between them that
/// `keep` keeps, `None` where either event never fired. At most `cap` calls are kept of each,
/// so that a run of many calls costs no more memory than that.
pub fn windows(
    path: &Path,
    wanted: &[(Vec<u32>, u32)],
    cap: usize,
    keep: impl Fn(&Call) -> bool,
) -> Result<Vec<Option<Window>>, ContractError> {
    // None: not started; Some((window, ended)).
    let mut state: Vec<Option<(Window, bool)>> = vec![None; wanted.len()];
    for entry in entries(path)? {
        match entry? {
            Entry::Event(e) => {
                for (w, (from, to)) in state.iter_mut().zip(wanted) {
                    match w {
                        None if from.contains(&e) => *w = Some((Window::default(), false)),
                        Some((_, ended)) if !*ended && *to == e => *ended = true,
                        _ => {}
                    }
                }
            }
            Entry::Call(c) if keep(&c) => {
                for (w, _) in state.iter_mut().flatten().filter(|w| !w.1) {
                    w.total += 1;
                    if w.calls.len() < cap {
                        w.calls.push(c);
                    }
                }
            }
            Entry::Call(_) => {}
        }
    }
    Ok(state
        .into_iter()
        .map(|w| w.filter(|w| w.1).map(|w| w.0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_goes_there_and_back_and_windows_are_cut_at_events() {
        let log = vec![
            Entry::Call(Call {
                nr: 12,
                arg0: 0,
                ret: 4096,
            }),
            Entry::Event(3),
            Entry::Call(Call {
                nr: 0,
                arg0: 3,
                ret: -9,
            }),
            Entry::Event(1),
            Entry::Call(Call {
                nr: 1,
                arg0: 1,
                ret: 5,
            }),
            Entry::Event(2),
        ];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("syscalls");
        let text: String = log.iter().map(Entry::line).collect();
        std::fs::write(&p, text.clone() + "s 1 2").unwrap();
        let back: Vec<Entry> = entries(&p).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(back, log, "the unfinished line left out");
        let wanted = [(vec![1, 3], 2), (vec![1], 2), (vec![7], 2), (vec![2], 3)];
        let w = windows(&p, &wanted, 1, |_| true).unwrap();
        let w0 = w[0].as_ref().unwrap();
        assert_eq!((w0.calls.len(), w0.total), (1, 2), "capped at 1 of 2");
        assert_eq!(w0.calls[0].nr, 0);
        assert_eq!(w[1].as_ref().unwrap().total, 1);
        assert_eq!(w[2], None, "never started");
        assert_eq!(w[3], None, "never ended");
        let reads = windows(&p, &wanted[..1], 9, |c| c.nr == 0).unwrap();
        assert_eq!(
            reads[0].as_ref().unwrap().total,
            1,
            "only what `keep` keeps"
        );
        std::fs::write(&p, "e 1\ns x 1 2\n").unwrap();
        let err = windows(&p, &[], 9, |_| true).unwrap_err().to_string();
        assert!(err.contains(":2: expected e EVENT"), "{err}");
    }
}
