//! Dense weighted row sets (vectors, centres, projection matrices) and SimPoint's text and binary
//! dataset files.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use crate::cfmt::push_g;
use crate::SimpointError;

/// Row-major dense matrix with one weight per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Number of columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<f64>,
    /// One weight per row.
    pub weights: Vec<f64>,
    /// When identical rows are stored once (see [`Dataset::dedup`]), the stored row of each row;
    /// `data` then holds the stored rows only.
    pub index: Option<Vec<u32>>,
}

/// Open-addressing table of rows compared bit for bit: finds identical rows in one pass.
pub(crate) struct RowTable {
    slots: Vec<u32>,
    mask: usize,
}

impl RowTable {
    /// A table for up to `rows` distinct rows.
    pub(crate) fn new(rows: usize) -> RowTable {
        let size = (rows + rows / 2).next_power_of_two().max(16);
        RowTable {
            slots: vec![u32::MAX; size],
            mask: size - 1,
        }
    }

    /// The id of an inserted row bitwise equal to `row` (`stored(id)` reads inserted rows);
    /// `None` when there is none, after recording `row` under `new_id`.
    pub(crate) fn find_or_insert<'a>(
        &mut self,
        row: &[f64],
        new_id: u32,
        stored: impl Fn(u32) -> &'a [f64],
    ) -> Option<u32> {
        let h = row.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, v| {
            (h ^ v.to_bits())
                .wrapping_mul(0x0100_0000_01b3)
                .rotate_left(23)
        });
        let mut at = ((h ^ (h >> 29)) as usize) & self.mask;
        loop {
            let s = self.slots[at];
            if s == u32::MAX {
                self.slots[at] = new_id;
                return None;
            }
            if stored(s)
                .iter()
                .zip(row)
                .all(|(a, b)| a.to_bits() == b.to_bits())
            {
                return Some(s);
            }
            at = (at + 1) & self.mask;
        }
    }
}

impl Dataset {
    /// An all-zero dataset.
    pub fn zeros(rows: usize, cols: usize) -> Dataset {
        Dataset::new(cols, vec![0.0; rows * cols], vec![0.0; rows])
    }

    /// Rows of `cols` values stored one after another in `data`, one weight each.
    pub fn new(cols: usize, data: Vec<f64>, weights: Vec<f64>) -> Dataset {
        Dataset {
            cols,
            data,
            weights,
            index: None,
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.weights.len()
    }

    /// Where row `i` is stored.
    #[inline]
    pub fn stored(&self, i: usize) -> usize {
        match &self.index {
            Some(ix) => ix[i] as usize,
            None => i,
        }
    }

    /// Row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> &[f64] {
        let r = self.stored(i);
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Row `i`, mutable (after [`Dataset::dedup`], the row shared by every row identical to it).
    #[inline]
    pub fn row_mut(&mut self, i: usize) -> &mut [f64] {
        let r = self.stored(i);
        &mut self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Stores bitwise-identical rows once (in place, in order of first occurrence), keeping an
    /// index from rows to stored rows; does nothing when every row is distinct. Phases repeat
    /// in real programs: identical interval vectors are common.
    pub fn dedup(&mut self) {
        let (n, c) = (self.rows(), self.cols);
        if c == 0 || n < 2 || self.index.is_some() {
            return;
        }
        let mut table = RowTable::new(n);
        let mut index = Vec::with_capacity(n);
        let mut unique = 0usize;
        for p in 0..n {
            // Stored rows occupy 0..unique <= p: row p is still in place.
            let data = &self.data;
            let found = table.find_or_insert(&data[p * c..(p + 1) * c], unique as u32, |s| {
                &data[s as usize * c..(s as usize + 1) * c]
            });
            let s = match found {
                Some(s) => s as usize,
                None => {
                    self.data.copy_within(p * c..(p + 1) * c, unique * c);
                    unique += 1;
                    unique - 1
                }
            };
            index.push(s as u32);
        }
        if unique == n {
            return;
        }
        self.data.truncate(unique * c);
        self.data.shrink_to_fit();
        self.index = Some(index);
    }

    /// Writes SimPoint's text format: `rows:w`, then `weight cols: v0 v1 ... ` per row (`%.20g`).
    pub fn write_text(&self, mut out: impl Write) -> std::io::Result<()> {
        let mut line = String::with_capacity(32 * (self.cols + 2));
        writeln!(out, "{}:w", self.rows())?;
        for i in 0..self.rows() {
            line.clear();
            push_g(&mut line, self.weights[i], 20);
            line.push(' ');
            line.push_str(&self.cols.to_string());
            line.push_str(": ");
            for &v in self.row(i) {
                push_g(&mut line, v, 20);
                line.push(' ');
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        out.flush()
    }

    /// Writes SimPoint's binary format: u32 rows, u32 1 (has weights), then per row f64 weight,
    /// u32 cols and the f64 values, little-endian as SimPoint writes them on x86-64.
    pub fn write_binary(&self, mut out: impl Write) -> std::io::Result<()> {
        out.write_all(&(self.rows() as u32).to_le_bytes())?;
        out.write_all(&1u32.to_le_bytes())?;
        let mut buf = Vec::with_capacity(12 + 8 * self.cols);
        for i in 0..self.rows() {
            buf.clear();
            buf.extend_from_slice(&self.weights[i].to_le_bytes());
            buf.extend_from_slice(&(self.cols as u32).to_le_bytes());
            for &v in self.row(i) {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            out.write_all(&buf)?;
        }
        out.flush()
    }

    /// Reads SimPoint's text format (the `:w` after the row count is optional; without it rows
    /// have no weight column and get weight 1/rows).
    pub fn read_text(input: impl BufRead, path: &Path) -> Result<Dataset, SimpointError> {
        let fmt_err = |line: u64, msg: String| SimpointError::Format {
            path: path.to_path_buf(),
            line,
            message: msg,
        };
        let mut words = Words::new(input, path);
        let header = words
            .next()?
            .ok_or_else(|| fmt_err(1, "empty file: expected '<rows>:w'".into()))?;
        let (rows_text, has_weights) = match header.strip_suffix(":w") {
            Some(r) => (r.to_string(), true),
            None => (header.trim_end_matches(':').to_string(), false),
        };
        let rows: usize = rows_text.parse().map_err(|_| {
            fmt_err(
                words.line,
                format!("expected a row count, found '{header}'"),
            )
        })?;
        let mut set = Dataset::new(0, Vec::new(), Vec::with_capacity(rows.min(1 << 20)));
        for r in 0..rows {
            let weight = if has_weights {
                let w = words.expect_f64("a row weight")?;
                if !(w.is_finite() && w >= 0.0) {
                    return Err(fmt_err(words.line, format!("bad row weight {w}")));
                }
                w
            } else {
                1.0 / rows as f64
            };
            let cols_word = words
                .next()?
                .ok_or_else(|| fmt_err(words.line, format!("file ends before row {}", r + 1)))?;
            let cols: usize = cols_word.trim_end_matches(':').parse().map_err(|_| {
                fmt_err(
                    words.line,
                    format!("expected '<cols>:', found '{cols_word}'"),
                )
            })?;
            if r == 0 {
                set.cols = cols;
            } else if cols != set.cols {
                return Err(fmt_err(
                    words.line,
                    format!(
                        "row {} has {cols} columns, earlier rows {}",
                        r + 1,
                        set.cols
                    ),
                ));
            }
            for _ in 0..cols {
                let v = words.expect_f64("a value")?;
                if !v.is_finite() {
                    return Err(fmt_err(words.line, format!("value {v} is not finite")));
                }
                set.data.push(v);
            }
            set.weights.push(weight);
        }
        if words.next()?.is_some() {
            return Err(fmt_err(
                words.line,
                format!("more than the {rows} rows announced"),
            ));
        }
        Ok(set)
    }

    /// Reads SimPoint's binary format.
    pub fn read_binary(mut input: impl Read, path: &Path) -> Result<Dataset, SimpointError> {
        let err = |msg: String| SimpointError::Format {
            path: path.to_path_buf(),
            line: 0,
            message: msg,
        };
        let mut read_exact = |buf: &mut [u8], what: &str| {
            input.read_exact(buf).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    err(format!("file ends inside {what}"))
                } else {
                    SimpointError::Io {
                        path: path.to_path_buf(),
                        source: e,
                    }
                }
            })
        };
        let mut b4 = [0u8; 4];
        let mut b8 = [0u8; 8];
        read_exact(&mut b4, "the header")?;
        let rows = u32::from_le_bytes(b4) as usize;
        read_exact(&mut b4, "the header")?;
        let has_weights = u32::from_le_bytes(b4);
        if has_weights > 1 {
            return Err(err(format!(
                "bad has-weights flag {has_weights} (expected 0 or 1)"
            )));
        }
        let mut set = Dataset::new(0, Vec::new(), Vec::with_capacity(rows.min(1 << 20)));
        for r in 0..rows {
            let weight = if has_weights == 1 {
                read_exact(&mut b8, "a row weight")?;
                f64::from_le_bytes(b8)
            } else {
                1.0 / rows as f64
            };
            read_exact(&mut b4, "a column count")?;
            let cols = u32::from_le_bytes(b4) as usize;
            if r == 0 {
                set.cols = cols;
            } else if cols != set.cols {
                return Err(err(format!(
                    "row {} has {cols} columns, earlier rows {}",
                    r + 1,
                    set.cols
                )));
            }
            for _ in 0..cols {
                read_exact(&mut b8, "a value")?;
                let v = f64::from_le_bytes(b8);
                if !v.is_finite() {
                    return Err(err(format!("row {}: value is not finite", r + 1)));
                }
                set.data.push(v);
            }
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(err(format!("row {}: bad weight {weight}", r + 1)));
            }
            set.weights.push(weight);
        }
        let mut extra = [0u8; 1];
        if input.read(&mut extra).map_err(|e| SimpointError::Io {
            path: path.to_path_buf(),
            source: e,
        })? != 0
        {
            return Err(err(format!("trailing bytes after the {rows} rows")));
        }
        Ok(set)
    }
}

/// The longest line of a text dataset read: a row of a few thousand dimensions.
const DATASET_LINE: usize = 16 << 20;

/// Whitespace-separated words of a text file, with line numbers for messages.
pub(crate) struct Words<'a, R> {
    input: bbv_files::input::Lines<R>,
    path: &'a Path,
    buf: String,
    pos: usize,
    /// Line of the last word returned.
    pub line: u64,
}

impl<'a, R: BufRead> Words<'a, R> {
    pub(crate) fn new(input: R, path: &'a Path) -> Self {
        Words {
            input: bbv_files::input::Lines::new(input, path, DATASET_LINE),
            path,
            buf: String::new(),
            pos: 0,
            line: 0,
        }
    }

    pub(crate) fn next(&mut self) -> Result<Option<String>, SimpointError> {
        loop {
            let rest = &self.buf[self.pos..];
            let trimmed = rest.trim_start();
            if !trimmed.is_empty() {
                let start = self.buf.len() - trimmed.len();
                let end = trimmed
                    .find(char::is_whitespace)
                    .map_or(self.buf.len(), |e| start + e);
                self.pos = end;
                return Ok(Some(self.buf[start..end].to_string()));
            }
            self.buf.clear();
            self.pos = 0;
            match self.input.next_line()? {
                Some((_, line)) => self.buf.push_str(line),
                None => return Ok(None),
            }
            self.line += 1;
        }
    }

    pub(crate) fn expect_f64(&mut self, what: &str) -> Result<f64, SimpointError> {
        let word = self.next()?.ok_or_else(|| SimpointError::Format {
            path: self.path.to_path_buf(),
            line: self.line,
            message: format!("file ends where {what} was expected"),
        })?;
        word.parse().map_err(|_| SimpointError::Format {
            path: self.path.to_path_buf(),
            line: self.line,
            message: format!(
                "expected {what}, found '{}'",
                bbv_files::input::quote(word.as_bytes())
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Dataset {
        Dataset::new(2, vec![0.5, -1.25e-7, 3.0, 0.0], vec![0.25, 0.75])
    }

    #[test]
    fn text_round_trip() {
        let mut out = Vec::new();
        sample().write_text(&mut out).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(
            text,
            "2:w\n0.25 2: 0.5 -1.2499999999999999434e-07 \n0.75 2: 3 0 \n"
        );
        let back = Dataset::read_text(&out[..], Path::new("t")).unwrap();
        assert_eq!(back, sample());
    }

    #[test]
    fn binary_round_trip_and_truncation() {
        let mut out = Vec::new();
        sample().write_binary(&mut out).unwrap();
        assert_eq!(out.len(), 8 + 2 * (12 + 16));
        assert_eq!(
            Dataset::read_binary(&out[..], Path::new("b")).unwrap(),
            sample()
        );
        let e = Dataset::read_binary(&out[..out.len() - 3], Path::new("b")).unwrap_err();
        assert!(e.to_string().contains("file ends inside a value"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn random_dataset_files_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = Dataset::read_text(&bytes[..], Path::new("t"));
            let _ = Dataset::read_binary(&bytes[..], Path::new("b"));
        }
    }

    #[test]
    fn huge_row_count_in_header_is_an_error_not_an_allocation() {
        let mut bin = Vec::new();
        bin.extend_from_slice(&u32::MAX.to_le_bytes());
        bin.extend_from_slice(&1u32.to_le_bytes());
        assert!(Dataset::read_binary(&bin[..], Path::new("b")).is_err());
        assert!(Dataset::read_text("99999999999:w\n".as_bytes(), Path::new("t")).is_err());
    }

    #[test]
    fn text_errors_have_lines() {
        let e =
            Dataset::read_text("2:w\n1 2: 1 2\n1 2: 1 x\n".as_bytes(), Path::new("t")).unwrap_err();
        assert_eq!(e.to_string(), "t:3: expected a value, found 'x'");
    }
}
