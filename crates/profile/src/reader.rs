use std::io::{BufRead, ErrorKind};
use std::path::{Path, PathBuf};

use crate::error::SyntaxMessage;
use crate::{open_input, Compression, ProfileError, MAX_BLOCK_ID};

/// One `:id:value` pair of a vector, in file order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Token {
    /// 1-based block id.
    pub id: u32,
    /// Count as SimPoint reads it (a double).
    pub value: f64,
}

/// Streaming reader of BBV text: one vector per `T` line.
pub struct BbvReader<R> {
    inner: R,
    path: PathBuf,
    compression: Compression,
    line: Vec<u8>,
    line_no: u64,
}

impl BbvReader<Box<dyn BufRead + Send>> {
    /// Opens a BBV file (plain, gzip or zstd, detected from the content).
    pub fn open(path: &Path) -> Result<Self, ProfileError> {
        let input = open_input(path)?;
        let mut r = BbvReader::new(input.reader, input.path);
        r.compression = input.compression;
        Ok(r)
    }
}

impl<R: BufRead> BbvReader<R> {
    /// Wraps decompressed text; `path` is used in error messages only.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        BbvReader {
            inner,
            path: path.into(),
            compression: Compression::None,
            line: Vec::with_capacity(4096),
            line_no: 0,
        }
    }

    /// Number of the last line read (1-based; 0 before the first).
    pub fn line_number(&self) -> u64 {
        self.line_no
    }

    /// The file name used in messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the next vector into `out` (cleared first). Returns `false` at end of input.
    pub fn next_vector(&mut self, out: &mut Vec<Token>) -> Result<bool, ProfileError> {
        out.clear();
        loop {
            // A line wholly inside the read buffer is parsed in place; only a line that spans
            // buffer refills is gathered into `self.line`.
            self.line.clear();
            let (parsed, used) = loop {
                let buf = match self.inner.fill_buf() {
                    Ok(b) => b,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(ProfileError::Decompress {
                            path: self.path.clone(),
                            line: self.line_no + 1,
                            compression: self.compression,
                            source,
                        })
                    }
                };
                if buf.is_empty() {
                    if self.line.is_empty() {
                        return Ok(false);
                    }
                    // Last line without a newline: read it (SimPoint 3.2 drops it).
                    break (Some(parse_line(&self.line, out)), 0);
                }
                match memchr::memchr(b'\n', buf) {
                    Some(end) if self.line.is_empty() => {
                        break (Some(parse_line(&buf[..=end], out)), end + 1);
                    }
                    Some(end) => {
                        self.line.extend_from_slice(&buf[..=end]);
                        break (None, end + 1);
                    }
                    None => {
                        if self.line.len() + buf.len() > crate::MAX_LINE {
                            return Err(ProfileError::LineTooLong {
                                path: self.path.clone(),
                                line: self.line_no + 1,
                                limit: crate::MAX_LINE,
                            });
                        }
                        self.line.extend_from_slice(buf);
                        let n = buf.len();
                        self.inner.consume(n);
                    }
                }
            };
            let result = match parsed {
                Some(r) => r,
                None => parse_line(&self.line, out),
            };
            self.inner.consume(used);
            self.line_no += 1;
            match result {
                Ok(true) => return Ok(true),
                Ok(false) => continue,
                Err((column, message)) => {
                    return Err(ProfileError::Syntax {
                        path: self.path.clone(),
                        line: self.line_no,
                        column,
                        message,
                    })
                }
            }
        }
    }
}

/// Parses a line: `Ok(false)` for a line that is not a vector (does not start with `T`).
#[inline]
fn parse_line(line: &[u8], out: &mut Vec<Token>) -> Result<bool, (usize, SyntaxMessage)> {
    if line.first() != Some(&b'T') {
        return Ok(false);
    }
    parse_t_line(line, out).map(|_| true)
}

/// C's isspace in the C locale, as a table lookup (this sits in the hottest loop).
static SPACE: [bool; 256] = {
    let mut t = [false; 256];
    t[b' ' as usize] = true;
    t[b'\t' as usize] = true;
    t[b'\n' as usize] = true;
    t[b'\r' as usize] = true;
    t[0x0b] = true;
    t[0x0c] = true;
    t
};

#[inline(always)]
fn is_space(b: u8) -> bool {
    SPACE[b as usize]
}

#[inline]
fn skip_space(line: &[u8], mut i: usize) -> usize {
    while i < line.len() && is_space(line[i]) {
        i += 1;
    }
    i
}

/// Parses the tokens of a line starting with `T`. Errors carry the 1-based column.
fn parse_t_line(line: &[u8], out: &mut Vec<Token>) -> Result<(), (usize, SyntaxMessage)> {
    let mut i = 1;
    loop {
        i = skip_space(line, i);
        if i >= line.len() {
            break;
        }
        if line[i] != b':' {
            return Err((i + 1, SyntaxMessage::ExpectedColon(char_at(line, i))));
        }
        if let Some((token, end)) = fast_token(line, i) {
            out.push(token);
            i = end;
            continue;
        }
        i = skip_space(line, i + 1);
        let id_start = i;
        let mut id: u64 = 0;
        while i < line.len() && line[i].is_ascii_digit() {
            id = id * 10 + u64::from(line[i] - b'0');
            if id > u64::from(MAX_BLOCK_ID) {
                return Err((id_start + 1, SyntaxMessage::IdTooLarge));
            }
            i += 1;
        }
        if i == id_start {
            return Err((id_start + 1, SyntaxMessage::BadId));
        }
        if id == 0 {
            return Err((id_start + 1, SyntaxMessage::ZeroId));
        }
        i = skip_space(line, i);
        if i >= line.len() || line[i] != b':' {
            let c = if i >= line.len() {
                '\n'
            } else {
                char_at(line, i)
            };
            return Err((i + 1, SyntaxMessage::ExpectedColon(c)));
        }
        i = skip_space(line, i + 1);
        let v_start = i;
        let (value, end) = parse_value(line, i).map_err(|m| (v_start + 1, m))?;
        i = end;
        if i < line.len() && !is_space(line[i]) && line[i] != b':' {
            return Err((i + 1, SyntaxMessage::TrailingGarbage(char_at(line, i))));
        }
        out.push(Token {
            id: id as u32,
            value,
        });
    }
    if out.is_empty() {
        return Err((1, SyntaxMessage::EmptyTLine));
    }
    Ok(())
}

/// The common spelling `:id:count` (no spaces inside, at most 8 and 15 digits, count followed
/// by whitespace, `:` or the end), parsed in one go; anything else returns `None` and goes
/// through the general parser, which also produces the errors.
#[inline(always)]
fn fast_token(line: &[u8], colon: usize) -> Option<(Token, usize)> {
    let digit = |j: usize| {
        line.get(j)
            .map(|b| b.wrapping_sub(b'0'))
            .filter(|&d| d < 10)
    };
    let mut j = colon + 1;
    let mut id: u32 = 0;
    while let Some(d) = digit(j) {
        if j - colon > 8 {
            return None;
        }
        id = id * 10 + u32::from(d);
        j += 1;
    }
    if j == colon + 1 || id == 0 || id > MAX_BLOCK_ID || line.get(j) != Some(&b':') {
        return None;
    }
    j += 1;
    let start = j;
    let mut value: u64 = 0;
    while let Some(d) = digit(j) {
        // Wraps past 19 digits, but more than 15 are refused below anyway.
        value = value.wrapping_mul(10).wrapping_add(u64::from(d));
        j += 1;
    }
    let digits = j - start;
    let ends = match line.get(j) {
        None => true,
        Some(&b) => is_space(b) || b == b':',
    };
    if digits == 0 || digits > 15 || !ends {
        return None;
    }
    Some((
        Token {
            id,
            value: value as i64 as f64,
        },
        j,
    ))
}

fn char_at(line: &[u8], i: usize) -> char {
    let b = line[i];
    if b.is_ascii() {
        b as char
    } else {
        char::REPLACEMENT_CHARACTER
    }
}

/// Parses a count as a double, the way `istream >> double` reads it in the C locale.
#[inline]
fn parse_value(line: &[u8], start: usize) -> Result<(f64, usize), SyntaxMessage> {
    let mut i = start;
    let mut int: u64 = 0;
    while i < line.len() && line[i].is_ascii_digit() && i - start < 15 {
        int = int * 10 + u64::from(line[i] - b'0');
        i += 1;
    }
    let plain_end = i == line.len() || is_space(line[i]) || line[i] == b':';
    if i > start && plain_end {
        // Up to 15 decimal digits convert exactly, as strtod would (and fit i64, whose
        // conversion is a single instruction).
        return Ok((int as i64 as f64, i));
    }
    let mut j = start;
    while j < line.len() && matches!(line[j], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
        j += 1;
    }
    let text = std::str::from_utf8(&line[start..j]).map_err(|_| SyntaxMessage::BadValue)?;
    if text.is_empty() {
        // "inf" and "nan" spelled out land here, as they would for istream.
        return Err(SyntaxMessage::BadValue);
    }
    let v: f64 = text.parse().map_err(|_| SyntaxMessage::BadValue)?;
    if !v.is_finite() {
        return Err(SyntaxMessage::NonFiniteValue);
    }
    if v < 0.0 {
        return Err(SyntaxMessage::NegativeValue);
    }
    // -0 reads as 0 so that no sign leaks into sums.
    Ok((v + 0.0, j))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<Token>, (usize, SyntaxMessage)> {
        let mut v = Vec::new();
        parse_t_line(s.as_bytes(), &mut v).map(|_| v)
    }

    fn tok(id: u32, value: f64) -> Token {
        Token { id, value }
    }

    #[test]
    fn exp_bbv_line() {
        assert_eq!(
            parse("T:1:66724   :2:100063   \n").unwrap(),
            vec![tok(1, 66724.0), tok(2, 100063.0)]
        );
    }

    #[test]
    fn whitespace_anywhere_and_no_separator() {
        assert_eq!(
            parse("T : 3 : 1.5e2\t:4:7:5:8").unwrap(),
            vec![tok(3, 150.0), tok(4, 7.0), tok(5, 8.0)]
        );
    }

    #[test]
    fn long_numbers_use_correct_rounding() {
        let v = parse("T:1:12345678901234567890").unwrap();
        assert_eq!(v[0].value, 12345678901234567890.0);
    }

    #[test]
    fn errors_name_column() {
        assert_eq!(parse("T:12:abc").unwrap_err(), (6, SyntaxMessage::BadValue));
        assert_eq!(parse("T:0:5").unwrap_err(), (3, SyntaxMessage::ZeroId));
        assert_eq!(
            parse("T:3:-1").unwrap_err(),
            (5, SyntaxMessage::NegativeValue)
        );
        assert_eq!(
            parse("T:3 5").unwrap_err(),
            (5, SyntaxMessage::ExpectedColon('5'))
        );
        assert_eq!(
            parse("T 3:5").unwrap_err(),
            (3, SyntaxMessage::ExpectedColon('3'))
        );
        assert_eq!(parse("T:3:inf").unwrap_err(), (5, SyntaxMessage::BadValue));
        assert_eq!(
            parse("T:3:1e999").unwrap_err(),
            (5, SyntaxMessage::NonFiniteValue)
        );
        assert_eq!(
            parse("T:3:5x").unwrap_err(),
            (6, SyntaxMessage::TrailingGarbage('x'))
        );
        assert_eq!(parse("T   \n").unwrap_err(), (1, SyntaxMessage::EmptyTLine));
        assert_eq!(
            parse("T:99999999999:1").unwrap_err(),
            (3, SyntaxMessage::IdTooLarge)
        );
        assert_eq!(parse("T:5:").unwrap_err(), (5, SyntaxMessage::BadValue));
    }

    #[test]
    fn reader_skips_other_lines_and_reads_last_line_without_newline() {
        let text = "# comment\n\nBlock id: 3\nT:1:2\nT:2:3";
        let mut r = BbvReader::new(text.as_bytes(), "x.bb");
        let mut v = Vec::new();
        assert!(r.next_vector(&mut v).unwrap());
        assert_eq!(v, vec![tok(1, 2.0)]);
        assert_eq!(r.line_number(), 4);
        assert!(r.next_vector(&mut v).unwrap());
        assert_eq!(v, vec![tok(2, 3.0)]);
        assert!(!r.next_vector(&mut v).unwrap());
    }

    #[test]
    fn error_message_has_file_line_column() {
        let mut r = BbvReader::new("T:1:2\nT:1:x\n".as_bytes(), "f.bb");
        let mut v = Vec::new();
        r.next_vector(&mut v).unwrap();
        let e = r.next_vector(&mut v).unwrap_err().to_string();
        assert!(e.starts_with("f.bb:2:5: "), "{e}");
    }
}
