//! Output files that appear all together or not at all: each is written to a temporary file
//! beside its destination and renamed only when every output was written.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::{interrupt, is_special_file, FilesError};

/// The error for an output whose folder does not exist: it names the folder, which is what
/// the user has to create.
fn missing_folder(path: &Path) -> Option<FilesError> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    (!parent.is_dir()).then(|| {
        FilesError::Invalid(format!(
            "{}: no such folder (for the output {})",
            parent.display(),
            path.display()
        ))
    })
}

/// The hidden name beside `path` an output is written under until it is committed.
fn temporary(path: &Path) -> Result<PathBuf, FilesError> {
    let name = path
        .file_name()
        .ok_or_else(|| FilesError::Invalid(format!("{}: not a file name", path.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".bbv-tmp-{}", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// A set of output files committed together.
#[derive(Default)]
pub struct AtomicFiles {
    pending: Vec<(PathBuf, PathBuf)>,
    /// Removes the temporary files if bbv is killed before they are renamed.
    cleanups: Vec<interrupt::Cleanup>,
}

impl AtomicFiles {
    /// Writes one output through `write` into a temporary file (a device or FIFO, such as
    /// `/dev/null`, is written in place).
    pub fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(), FilesError> {
        if is_special_file(path) {
            let file = fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| FilesError::io(path, e))?;
            let mut out = BufWriter::new(file);
            return write(&mut out)
                .and_then(|_| out.flush())
                .map_err(|e| FilesError::io(path, e));
        }
        let file = self.stage(path, |tmp| File::create(tmp))?;
        let mut out = BufWriter::new(file);
        write(&mut out)
            .and_then(|_| out.flush())
            .map_err(|e| FilesError::io(path, e))
    }

    /// Takes `made`, a finished file on `path`'s file system (another process may have written
    /// it), as `path`'s output: renamed with the others, removed if they are not committed.
    /// Its removal if bbv is killed first is the caller's (a registered folder holding it).
    pub fn adopt(&mut self, made: &Path, path: &Path) -> Result<(), FilesError> {
        self.free(path)?;
        self.pending.push((made.to_path_buf(), path.to_path_buf()));
        Ok(())
    }

    /// A symbolic link at `path` to `target`, made beside it under a temporary name and
    /// renamed with the other outputs.
    pub fn symlink(&mut self, path: &Path, target: &Path) -> Result<(), FilesError> {
        self.stage(path, |tmp| {
            let _ = fs::remove_file(tmp);
            std::os::unix::fs::symlink(target, tmp)
        })
    }

    /// Whether `path` can take an output: not a folder, not named for another one.
    fn free(&self, path: &Path) -> Result<(), FilesError> {
        if path.is_dir() {
            return Err(FilesError::NotAFile {
                path: path.to_path_buf(),
                what: "a folder",
            });
        }
        if self.pending.iter().any(|(_, p)| p == path) {
            return Err(FilesError::Invalid(format!(
                "{} is named for two different outputs",
                path.display()
            )));
        }
        Ok(())
    }

    /// Makes `path`'s output under its temporary name with `make` and registers it for the
    /// commit (and for removal if bbv is killed first).
    fn stage<T>(
        &mut self,
        path: &Path,
        make: impl FnOnce(&Path) -> std::io::Result<T>,
    ) -> Result<T, FilesError> {
        self.free(path)?;
        let tmp = temporary(path)?;
        let (made, cleanup) = interrupt::Cleanup::create(|| Ok((make(&tmp)?, tmp.clone())))
            .map_err(|e| missing_folder(path).unwrap_or_else(|| FilesError::io(path, e)))?;
        self.cleanups.push(cleanup);
        self.pending.push((tmp, path.to_path_buf()));
        Ok(made)
    }

    /// Renames every temporary file to its destination, all before a killing signal is acted
    /// on or none.
    pub fn commit(self) -> Result<Vec<PathBuf>, FilesError> {
        let hold = interrupt::hold();
        self.commit_held(&hold)
    }

    /// [`commit`](Self::commit) under the caller's hold, which covers more renames after it.
    pub fn commit_held(mut self, _: &interrupt::Hold) -> Result<Vec<PathBuf>, FilesError> {
        let pending = std::mem::take(&mut self.pending);
        // A rename onto a folder fails: found before the first rename, nothing changes.
        if let Some((_, dest)) = pending.iter().find(|(_, d)| d.is_dir()) {
            for (t, _) in &pending {
                let _ = fs::remove_file(t);
            }
            return Err(FilesError::NotAFile {
                path: dest.clone(),
                what: "a folder",
            });
        }
        let mut done = Vec::new();
        for (i, (tmp, dest)) in pending.iter().enumerate() {
            if let Err(e) = fs::rename(tmp, dest) {
                for (t, _) in &pending[i..] {
                    let _ = fs::remove_file(t);
                }
                return Err(FilesError::io(dest, e));
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

/// Writes `bytes` to `path` whole or not at all (one file of an [`AtomicFiles`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FilesError> {
    let mut files = AtomicFiles::default();
    files.write(path, |w| w.write_all(bytes))?;
    files.commit().map(drop)
}

/// Moves a finished file to its final name: a rename, or a copy to a temporary name beside the
/// destination and a rename when the two are on different file systems.
pub fn move_file(from: &Path, to: &Path) -> Result<(), FilesError> {
    if is_special_file(to) {
        // Renaming onto /dev/null would replace the device with our file.
        let mut src = File::open(from).map_err(|e| FilesError::io(from, e))?;
        let mut dest = fs::OpenOptions::new()
            .write(true)
            .open(to)
            .map_err(|e| FilesError::io(to, e))?;
        std::io::copy(&mut src, &mut dest).map_err(|e| FilesError::io(to, e))?;
        let _ = fs::remove_file(from);
        return Ok(());
    }
    if fs::rename(from, to).is_ok() {
        return Ok(());
    }
    let parent = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(parent).map_err(|e| FilesError::io(parent, e))?;
    fs::copy(from, tmp.path()).map_err(|e| FilesError::io(to, e))?;
    tmp.persist(to).map_err(|e| FilesError::io(to, e.error))?;
    let _ = fs::remove_file(from);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_set_leaves_the_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        fs::write(&a, "old a").unwrap();
        fs::write(&b, "old b").unwrap();
        let mut files = AtomicFiles::default();
        files.write(&a, |w| w.write_all(b"new a")).unwrap();
        let err = files
            .write(&b, |_| Err(std::io::Error::other("disk full")))
            .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        drop(files);
        assert_eq!(fs::read_to_string(&a).unwrap(), "old a");
        assert_eq!(fs::read_to_string(&b).unwrap(), "old b");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            2,
            "no temporary left"
        );
    }

    #[test]
    fn an_adopted_file_is_renamed_with_the_set_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (made, dest) = (dir.path().join(".made"), dir.path().join("dest"));
        for commit in [false, true] {
            fs::write(&made, "made elsewhere").unwrap();
            let mut files = AtomicFiles::default();
            files.adopt(&made, &dest).unwrap();
            assert!(matches!(
                files.adopt(&made, &dest),
                Err(FilesError::Invalid(_))
            ));
            assert!(matches!(
                files.adopt(&made, dir.path()),
                Err(FilesError::NotAFile { .. })
            ));
            if commit {
                files.commit().unwrap();
                assert_eq!(fs::read_to_string(&dest).unwrap(), "made elsewhere");
            } else {
                drop(files);
                assert!(!dest.exists());
            }
            assert!(!made.exists());
        }
    }

    #[test]
    fn a_committed_set_replaces_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        fs::write(&a, "old").unwrap();
        let mut files = AtomicFiles::default();
        files.write(&a, |w| w.write_all(b"new")).unwrap();
        let twice = files.write(&a, |w| w.write_all(b"again"));
        assert!(matches!(twice, Err(FilesError::Invalid(_))));
        assert_eq!(files.commit().unwrap(), vec![a.clone()]);
        assert_eq!(fs::read_to_string(&a).unwrap(), "new");
        write_atomic(&a, b"one").unwrap();
        assert_eq!(fs::read_to_string(&a).unwrap(), "one");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_device_is_written_in_place() {
        write_atomic(Path::new("/dev/null"), b"x").unwrap();
        assert!(is_special_file(Path::new("/dev/null")));
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("f");
        fs::write(&from, "x").unwrap();
        move_file(&from, Path::new("/dev/null")).unwrap();
        assert!(!from.exists());
    }
}
