//! Reading back the tab-separated files a run folder holds (`launches.tsv`, `times.tsv`): one
//! loop, one way of naming a bad cell by file and line.

use std::path::Path;

use crate::CudaError;

/// The longest line accepted (a kernel name can be long).
const MAX_LINE: usize = 1 << 20;

/// One line being read: its place, for errors.
pub(crate) struct Row<'a> {
    path: &'a Path,
    line: u64,
}

impl Row<'_> {
    /// An error at this line.
    pub fn err(&self, message: String) -> CudaError {
        CudaError::Parse {
            path: self.path.to_path_buf(),
            line: self.line,
            message,
        }
    }

    /// A number cell.
    pub fn num<T: std::str::FromStr>(&self, cell: &str) -> Result<T, CudaError> {
        cell.parse().map_err(|_| {
            let shown = bbv_files::input::quote(cell.as_bytes());
            self.err(format!("{shown} is not a number in range"))
        })
    }

    /// A grid's or block's dimensions, `X,Y,Z` ([`dims_cell`]'s).
    pub fn dims(&self, cell: &str) -> Result<[u32; 3], CudaError> {
        match cell.split(',').collect::<Vec<_>>()[..] {
            [x, y, z] => Ok([self.num(x)?, self.num(y)?, self.num(z)?]),
            _ => Err(self.err(format!(
                "{} is not X,Y,Z",
                bbv_files::input::quote(cell.as_bytes())
            ))),
        }
    }
}

/// A grid's or block's dimensions as the run folder's TSV files write them: `X,Y,Z`.
pub fn dims_cell(d: [u32; 3]) -> String {
    format!("{},{},{}", d[0], d[1], d[2])
}

/// Reads `path`: `header` checks line 1's cells, `row` makes each later line's value. An
/// empty file is an error.
pub(crate) fn read<T>(
    path: &Path,
    mut header: impl FnMut(&Row, &[&str]) -> Result<(), CudaError>,
    mut row: impl FnMut(&Row, &[&str]) -> Result<T, CudaError>,
) -> Result<Vec<T>, CudaError> {
    // Stored records may be compressed (gzip or zstd, told by their content); a file that
    // cannot be opened is named as every reader names it.
    let input = bbv_profile::open_input(path).map_err(|e| match e {
        bbv_profile::ProfileError::Files(e) => CudaError::Files(e),
        e => Row { path, line: 0 }.err(e.to_string()),
    })?;
    let mut lines = bbv_files::input::Lines::new(input.reader, path, MAX_LINE);
    let mut out = Vec::new();
    while let Some((line, text)) = lines.next_line()? {
        let r = Row { path, line };
        let cells: Vec<&str> = text.split('\t').collect();
        match line {
            1 => header(&r, &cells)?,
            _ => out.push(row(&r, &cells)?),
        }
    }
    if lines.line() == 0 {
        return Err(Row { path, line: 0 }.err("empty file".into()));
    }
    Ok(out)
}
