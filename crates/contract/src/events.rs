//! The marker events a replay's plugin writes ([`crate::files::EVENTS`]): one line per
//! event reached, `EVENT POSITION id:count ...` (the event's number, the thread's instruction
//! count there, and the blocks' counts at that moment).

use std::collections::HashMap;
use std::path::Path;

use crate::ContractError;

/// A trace window's start event that means the whole run (from the first instruction to the
/// last): `trace=FILE`'s windows number events from 0, never this high.
pub const WHOLE_RUN: u32 = u32::MAX - 1;

/// An event no window reaches: a whole run's end, or its region of interest's start when it
/// starts with the run.
pub const NEVER: u32 = u32::MAX;

/// Each event's first occurrence: its position and its `(block id, count)` pairs.
pub type Events = HashMap<usize, (u64, Vec<(u32, u64)>)>;

/// Reads an events file. A last line left unfinished (the guest killed while the plugin
/// appended it) is left out.
pub fn read_events(path: &Path) -> Result<Events, ContractError> {
    let text = std::fs::read_to_string(path).map_err(|source| ContractError::Io {
        path: path.into(),
        source,
    })?;
    let mut out = Events::new();
    for (n, line) in crate::whole_lines(&text).lines().enumerate() {
        let bad = || ContractError::Parse {
            path: path.into(),
            line: n + 1,
            what: "`EVENT POSITION id:count ...`".into(),
        };
        let mut f = line.split(' ');
        let event: usize = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let pos: u64 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let pairs = f
            .map(|t| {
                let (a, b) = t.split_once(':').ok_or_else(bad)?;
                Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
            })
            .collect::<Result<Vec<(u32, u64)>, ContractError>>()?;
        out.entry(event).or_insert((pos, pairs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_occurrences_and_no_unfinished_line() {
        let dir = std::env::temp_dir().join(format!("bbv-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events");
        std::fs::write(&path, "0 10 1:2 3:4\n1 20\n0 30 1:9\n2 4").unwrap();
        let e = read_events(&path).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[&0], (10, vec![(1, 2), (3, 4)]));
        assert_eq!(e[&1], (20, vec![]));
        std::fs::write(&path, "0 10 1-2\n").unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("events:1: expected `EVENT POSITION id:count ...`"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
