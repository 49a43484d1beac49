use std::io::{self, Write};

/// Writes BBV text the way valgrind's exp-bbv does: `T:id:count   :id:count   \n`.
pub struct BbvWriter<W: Write> {
    out: W,
    vectors: u64,
}

impl<W: Write> BbvWriter<W> {
    /// Wraps an output.
    pub fn new(out: W) -> Self {
        BbvWriter { out, vectors: 0 }
    }

    /// Writes one interval; `counts` are `(1-based id, count)` pairs, written in the given order.
    /// Zero counts are skipped, as exp-bbv never writes them.
    pub fn write_vector(&mut self, counts: &[(u32, u64)]) -> io::Result<()> {
        self.out.write_all(b"T")?;
        for &(id, count) in counts {
            if count == 0 {
                continue;
            }
            write!(self.out, ":{id}:{count}   ")?;
        }
        self.out.write_all(b"\n")?;
        self.vectors += 1;
        Ok(())
    }

    /// Writes a `#` comment line.
    pub fn write_comment(&mut self, text: &str) -> io::Result<()> {
        for line in text.lines() {
            writeln!(self.out, "# {line}")?;
        }
        Ok(())
    }

    /// Number of vectors written so far.
    pub fn vectors(&self) -> u64 {
        self.vectors
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BbvReader;

    #[test]
    fn round_trip() {
        let mut w = BbvWriter::new(Vec::new());
        w.write_comment("made by a test").unwrap();
        w.write_vector(&[(1, 5), (3, 0), (7, 12)]).unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes, b"# made by a test\nT:1:5   :7:12   \n");
        let mut r = BbvReader::new(&bytes[..], "x");
        let mut v = Vec::new();
        assert!(r.next_vector(&mut v).unwrap());
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].id, 7);
        assert_eq!(v[1].value, 12.0);
    }
}
