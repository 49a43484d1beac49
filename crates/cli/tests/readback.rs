//! Every JSON and CSV file bbv wrote into a folder, read back as another program would: JSON
//! that parses, with a number wherever bbv's own reader or a user's script expects one (never
//! `null` where a NaN or an infinity was written), and CSV per RFC 4180 (the `csv` crate),
//! every row as wide as the header, no field `NaN` or `inf`. The fuzz test's good folders go
//! through it (fuzz_cli.rs, fuzz_tools_cli.rs), so every kind of file the commands there write
//! is covered; the commands that read them back (`report`, `regions`, `simulate`, `gpu
//! simulate`, `checkpoint --check`) run on those same folders.

use std::path::{Path, PathBuf};

/// Keys whose `null` says "none" by design, not a number lost.
const MAY_BE_NULL: [&str; 0] = [];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let t = e.file_type().unwrap();
        if t.is_dir() {
            files(&e.path(), out);
        } else if t.is_file() && (name.ends_with(".json") || name.ends_with(".csv")) {
            out.push(e.path());
        }
    }
}

/// `null`s in `v` at keys not in [`MAY_BE_NULL`], as JSON paths.
fn nulls(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if x.is_null() && !MAY_BE_NULL.contains(&k.as_str()) {
                    out.push(format!("{at}.{k}"));
                }
                nulls(x, &format!("{at}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                if x.is_null() {
                    out.push(format!("{at}[{i}]"));
                }
                nulls(x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Checks every JSON and CSV file under `dir`; returns how many there were.
pub fn every_file_reads_back(dir: &Path) -> usize {
    let mut paths = Vec::new();
    files(dir, &mut paths);
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap();
        if p.extension().is_some_and(|e| e == "json") {
            // A file of one document, or of one document per line (JSON Lines).
            let docs: Vec<serde_json::Value> = match serde_json::from_str(&text) {
                Ok(v) => vec![v],
                Err(_) => text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| {
                        serde_json::from_str(l)
                            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()))
                    })
                    .collect(),
            };
            let mut found = Vec::new();
            for d in &docs {
                nulls(d, "", &mut found);
            }
            assert!(found.is_empty(), "{}: null at {found:?}", p.display());
        } else {
            let mut r = csv::Reader::from_reader(text.as_bytes());
            let width = r
                .headers()
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                .len();
            for (i, row) in r.records().enumerate() {
                let row = row.unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert_eq!(row.len(), width, "{}: row {}", p.display(), i + 2);
                for f in &row {
                    let lower = f.trim().to_ascii_lowercase();
                    assert!(
                        !["nan", "inf", "-inf", "infinity", "null"].contains(&lower.as_str()),
                        "{}: row {}: {f}",
                        p.display(),
                        i + 2
                    );
                }
            }
        }
    }
    paths.len()
}
