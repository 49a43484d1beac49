//! Per-interval metrics (`metrics.csv`): what `bbv run --validate` measures besides the BBV, and
//! the cache geometry its model uses.
//!
//! One row per interval, the same cuts as the BBV, all threads together. Producers write rows
//! with [`MetricsWriter`]; consumers read them with [`read_metrics`], which checks the header
//! and every field and names the file and line of anything wrong.

use std::fmt;
use std::io::{self, BufRead, Write};
use std::path::Path;

use crate::ProfileError;

/// The columns after `interval`, in file order.
pub const METRIC_COLUMNS: [&str; 8] = [
    "instructions",
    "loads",
    "stores",
    "taken_branches",
    "pages",
    "l1d_misses",
    "l2_misses",
    "branch_mispredicts",
];

/// One interval's metrics, in [`METRIC_COLUMNS`] order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsRow(pub [u64; 8]);

impl MetricsRow {
    /// Instructions of the interval (all threads).
    pub fn instructions(&self) -> u64 {
        self.0[0]
    }
}

/// The CSV header line (without the newline).
pub fn metrics_header() -> String {
    format!("interval,{}", METRIC_COLUMNS.join(","))
}

/// Writes `metrics.csv`: the header, then one row per [`MetricsWriter::row`].
pub struct MetricsWriter<W: Write> {
    out: W,
    next: u64,
}

impl<W: Write> MetricsWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "{}", metrics_header())?;
        Ok(MetricsWriter { out, next: 0 })
    }

    /// Writes the next interval's row.
    pub fn row(&mut self, row: &MetricsRow) -> io::Result<()> {
        let mut line = self.next.to_string();
        for v in row.0 {
            line.push(',');
            line.push_str(&v.to_string());
        }
        line.push('\n');
        self.next += 1;
        // One write per row, so a reader never sees half a row.
        self.out.write_all(line.as_bytes())
    }

    /// The destination.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The longest `metrics.csv` line read: nine numbers and any later columns.
pub const METRICS_LINE: usize = 64 << 10;

/// Reads a `metrics.csv`: the header must start with the known columns (later columns are
/// allowed and ignored), intervals must be numbered 0, 1, 2, ... and every field a whole number.
pub fn read_metrics(path: &Path) -> Result<Vec<MetricsRow>, ProfileError> {
    let file = bbv_files::input::open(path)?;
    read_metrics_from(io::BufReader::new(file), path)
}

/// [`read_metrics`] from any reader; `path` names it in errors.
pub fn read_metrics_from(
    input: impl BufRead,
    path: &Path,
) -> Result<Vec<MetricsRow>, ProfileError> {
    let bad = |line: u64, message: String| ProfileError::Table {
        path: path.into(),
        line,
        message,
    };
    let mut rows = Vec::new();
    let mut width = 0;
    let mut lines = bbv_files::input::Lines::new(input, path, METRICS_LINE);
    while let Some((n, text)) = lines.next_line()? {
        if n == 1 {
            let names: Vec<&str> = text.split(',').collect();
            let want = metrics_header();
            let known: Vec<&str> = want.split(',').collect();
            if names.len() < known.len() || names[..known.len()] != known[..] {
                return Err(bad(n, format!("expected the header '{want}'")));
            }
            width = names.len();
            continue;
        }
        if text.is_empty() {
            continue;
        }
        let fields: Vec<&str> = text.split(',').collect();
        if fields.len() != width {
            return Err(bad(
                n,
                format!("expected {width} fields, found {}", fields.len()),
            ));
        }
        let mut values = [0u64; 9];
        for (i, (v, name)) in values.iter_mut().zip(fields.iter()).enumerate() {
            *v = name.trim().parse().map_err(|_| {
                let column = if i == 0 {
                    "interval"
                } else {
                    METRIC_COLUMNS[i - 1]
                };
                bad(
                    n,
                    format!(
                        "{column}: expected a whole number, found '{}'",
                        bbv_files::input::quote(name.as_bytes())
                    ),
                )
            })?;
        }
        if values[0] != rows.len() as u64 {
            return Err(bad(
                n,
                format!("expected interval {}, found {}", rows.len(), values[0]),
            ));
        }
        let mut row = MetricsRow::default();
        row.0.copy_from_slice(&values[1..]);
        rows.push(row);
    }
    if width == 0 {
        return Err(bad(1, "empty file: expected the metrics header".into()));
    }
    Ok(rows)
}

/// A set-associative cache's geometry (`--l1d SIZE,WAYS,LINE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Bytes.
    pub size: u64,
    /// Associativity.
    pub ways: u64,
    /// Line size in bytes.
    pub line: u64,
}

impl CacheGeometry {
    /// The default L1D: 32 KiB, 8-way, 64-byte lines.
    pub const L1D: CacheGeometry = CacheGeometry {
        size: 32 << 10,
        ways: 8,
        line: 64,
    };
    /// The default L2: 1 MiB, 16-way, 64-byte lines.
    pub const L2: CacheGeometry = CacheGeometry {
        size: 1 << 20,
        ways: 16,
        line: 64,
    };

    /// Parses `SIZE,WAYS,LINE` (or with `:` between them); sizes may end in K, M or G (binary).
    pub fn parse(text: &str) -> Result<CacheGeometry, String> {
        let parts: Vec<&str> = text.split([',', ':']).map(str::trim).collect();
        let [size, ways, line] = parts[..] else {
            return Err(format!(
                "'{text}': expected SIZE,WAYS,LINE (for example 32768,8,64 or 32K,8,64)"
            ));
        };
        let number = |what: &str, s: &str| -> Result<u64, String> {
            let (digits, shift) = match s.as_bytes().last() {
                Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
                Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
                Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
                _ => (s, 0),
            };
            digits
                .parse::<u64>()
                .ok()
                .and_then(|v| v.checked_mul(1 << shift))
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("'{text}': {what} '{s}' is not a positive whole number"))
        };
        let g = CacheGeometry {
            size: number("size", size)?,
            ways: number("ways", ways)?,
            line: number("line size", line)?,
        };
        g.check().map_err(|e| format!("'{text}': {e}"))?;
        Ok(g)
    }

    /// Why the geometry cannot be modelled, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if !self.size.is_power_of_two() {
            return Err(format!("size {} is not a power of two", self.size));
        }
        if !self.line.is_power_of_two() || !(4..=4096).contains(&self.line) {
            return Err(format!(
                "line size {} is not a power of two from 4 to 4096",
                self.line
            ));
        }
        if self.size > 1 << 32 {
            return Err(format!("size {} is over 4 GiB", self.size));
        }
        let set_bytes = self.ways.saturating_mul(self.line);
        if set_bytes > self.size || !self.size.is_multiple_of(set_bytes) {
            return Err(format!(
                "{} ways of {}-byte lines do not divide {} bytes into whole sets (ways must be a power of two no larger than size/line)",
                self.ways, self.line, self.size
            ));
        }
        Ok(())
    }

    /// Number of sets.
    pub fn sets(&self) -> u64 {
        self.size / (self.ways * self.line)
    }

    /// `SIZE:WAYS:LINE`, as the QEMU plugin takes it (QEMU splits plugin arguments at commas).
    pub fn plugin_arg(&self) -> String {
        format!("{}:{}:{}", self.size, self.ways, self.line)
    }
}

impl fmt::Display for CacheGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.size, self.ways, self.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry() {
        assert_eq!(CacheGeometry::parse("32K,8,64"), Ok(CacheGeometry::L1D));
        assert_eq!(CacheGeometry::parse("1048576:16:64"), Ok(CacheGeometry::L2));
        assert_eq!(CacheGeometry::parse("1M,16,64").unwrap().sets(), 1024);
        for bad in [
            "48K,12,64",
            "32K,8",
            "32K,8,48",
            "32K,0,64",
            "64,2,64",
            "x,8,64",
            "32K,3,64",
        ] {
            let e = CacheGeometry::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert!(CacheGeometry::parse("48K,12,64")
            .unwrap_err()
            .contains("not a power of two"));
    }

    #[test]
    fn csv_round_trip_and_errors() {
        let mut w = MetricsWriter::new(Vec::new()).unwrap();
        w.row(&MetricsRow([100, 20, 10, 5, 3, 2, 1, 4])).unwrap();
        w.row(&MetricsRow([90, 0, 0, 0, 0, 0, 0, 0])).unwrap();
        let bytes = w.into_inner();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("interval,instructions,loads,stores,taken_branches,pages,"));
        let rows = read_metrics_from(&bytes[..], Path::new("m.csv")).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0[7], 4);
        let err = |s: &str| {
            read_metrics_from(s.as_bytes(), Path::new("m.csv"))
                .unwrap_err()
                .to_string()
        };
        let head = metrics_header();
        assert!(err("").contains("m.csv:1:"));
        assert!(err("a,b\n").contains("m.csv:1: expected the header"));
        assert!(
            err(&format!("{head}\n0,1,2,3,4,5,6,7,x\n")).contains("m.csv:2: branch_mispredicts")
        );
        assert!(err(&format!("{head}\n1,1,2,3,4,5,6,7,8\n")).contains("expected interval 0"));
        assert!(err(&format!("{head}\n0,1,2\n")).contains("expected 9 fields"));
        // Extra columns are allowed.
        let more = format!("{head},cpi\n0,1,2,3,4,5,6,7,8,9\n");
        assert_eq!(
            read_metrics_from(more.as_bytes(), Path::new("m"))
                .unwrap()
                .len(),
            1
        );
    }
}
