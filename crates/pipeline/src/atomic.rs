//! Output files that appear all together or not at all: each is written to a temporary file
//! beside its destination and renamed only when every output was written.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::PipelineError;

/// A set of output files committed together.
#[derive(Default)]
pub struct AtomicFiles {
    pending: Vec<(PathBuf, PathBuf)>,
    /// Removes the temporary files if bbv is killed before they are renamed.
    cleanups: Vec<bbv_collect::interrupt::Cleanup>,
}

impl AtomicFiles {
    /// Writes one output through `write` into a temporary file (a device or FIFO, such as
    /// `/dev/null`, is written in place).
    pub fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(), PipelineError> {
        if bbv_profile::is_special_file(path) {
            let file = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| PipelineError::io(path, e))?;
            let mut out = BufWriter::new(file);
            return write(&mut out)
                .and_then(|_| out.flush())
                .map_err(|e| PipelineError::io(path, e));
        }
        if self.pending.iter().any(|(_, p)| p == path) {
            return Err(PipelineError::Invalid(format!(
                "{} is named for two different outputs",
                path.display()
            )));
        }
        let name = path.file_name().ok_or_else(|| {
            PipelineError::Invalid(format!("{}: not a file name", path.display()))
        })?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".bbv-tmp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let (file, cleanup) =
            bbv_collect::interrupt::Cleanup::create(|| Ok((File::create(&tmp)?, tmp.clone())))
                .map_err(|e| PipelineError::io(path, e))?;
        self.cleanups.push(cleanup);
        self.pending.push((tmp.clone(), path.to_path_buf()));
        let mut out = BufWriter::new(file);
        write(&mut out)
            .and_then(|_| out.flush())
            .map_err(|e| PipelineError::io(path, e))
    }

    /// Renames every temporary file to its destination, all before a killing signal is acted
    /// on or none.
    pub fn commit(self) -> Result<Vec<PathBuf>, PipelineError> {
        let hold = bbv_collect::interrupt::hold();
        self.commit_held(&hold)
    }

    /// [`commit`](Self::commit) under the caller's hold, which covers more renames after it.
    pub fn commit_held(
        mut self,
        _: &bbv_collect::interrupt::Hold,
    ) -> Result<Vec<PathBuf>, PipelineError> {
        let pending = std::mem::take(&mut self.pending);
        let mut done = Vec::new();
        for (i, (tmp, dest)) in pending.iter().enumerate() {
            if let Err(e) = fs::rename(tmp, dest) {
                for (t, _) in &pending[i..] {
                    let _ = fs::remove_file(t);
                }
                return Err(PipelineError::io(dest, e));
            }
            done.push(dest.clone());
        }
        Ok(done)
    }
}

impl Drop for AtomicFiles {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = fs::remove_file(tmp);
        }
    }
}
