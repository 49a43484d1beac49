//! Output folders that change in one step: a command that writes several files into a folder
//! builds the folder's next state beside it and swaps the two at once, so that a kill at any
//! instant (SIGKILL and power loss included) leaves the complete old state or the complete new
//! one, never a mix.
//!
//! [`Staged::open`] locks the folder (one writer at a time: a second is refused at once,
//! naming the first), removes what killed writers left beside it, and makes the staging
//! folder `.NAME.bbv-PID.next` beside it, holding a hard link to each of the folder's files:
//! the command reads and writes there as it would in the folder itself. bbv replaces a file by
//! writing a new one and renaming it over the old ([`crate::AtomicFiles`]), never in place,
//! so the old folder's files are never touched. [`Staged::commit`] flushes the new files to
//! disk, then exchanges the two folders with one `renameat2(RENAME_EXCHANGE)` (where the file
//! system has no exchange: two renames, and an open of the folder that finds only the old one
//! puts it back) and removes the old state. Dropped without a commit, the staging folder goes
//! and the folder is as it was.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{interrupt, FilesError};

/// Folders being staged or committed by this process: what a signal's message says was kept,
/// and the staging names an error message is told in terms of the folder.
static ACTIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

#[derive(Clone)]
struct Entry {
    /// The folder as the user named it (what messages say).
    shown: PathBuf,
    /// The folder's canonical path (what files that outlive the stage record).
    dir: PathBuf,
    stage: PathBuf,
    /// The stage is in place: the folder holds the new state.
    committed: bool,
}

fn active() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A folder's next state, being built beside it.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    stage: PathBuf,
    /// The folder, open and locked while this lives.
    _lock: File,
    /// The folder did not exist before: it goes again if nothing is committed.
    created: bool,
    /// Removes the staging folder if bbv is killed.
    _cleanup: Option<interrupt::Cleanup>,
    committed: bool,
}

/// `.NAME.bbv-` for the folder `dir`: the prefix of what bbv stages beside it.
fn prefix(dir: &Path) -> String {
    let name = dir.file_name().unwrap_or(OsStr::new("")).to_string_lossy();
    format!(".{name}.bbv-")
}

fn parent(dir: &Path) -> &Path {
    dir.parent().unwrap_or(Path::new("/"))
}

impl Staged {
    /// Locks `dir` (made if missing) and stages its next state beside it.
    pub fn open(dir: &Path) -> Result<Staged, FilesError> {
        let given = dir;
        if dir.as_os_str().is_empty() {
            return Err(FilesError::Invalid("an empty folder name".into()));
        }
        interrupt::farewell(kept_lines);
        restore_orphan(dir);
        let created = match fs::create_dir(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(FilesError::io(dir, e)),
        };
        let fail = |e: FilesError| {
            if created {
                let _ = fs::remove_dir(dir);
            }
            e
        };
        let (lock, dir) = lock(dir).map_err(fail)?;
        interrupt::remove_orphans(parent(&dir), &prefix(&dir));
        let stage = parent(&dir).join(format!("{}.next", interrupt::tagged(&prefix(&dir))));
        let (_, cleanup) = interrupt::Cleanup::create(|| {
            fs::create_dir(&stage)?;
            Ok(((), stage.clone()))
        })
        .map_err(|e| fail(FilesError::io(&stage, e)))?;
        let staged = Staged {
            dir,
            stage,
            _lock: lock,
            created,
            _cleanup: Some(cleanup),
            committed: false,
        };
        let mode = fs::metadata(&staged.dir).map(|m| m.mode() & 0o7777);
        if let Ok(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(&staged.stage, fs::Permissions::from_mode(mode));
        }
        link_tree(&staged.dir, &staged.stage)?;
        active().push(Entry {
            shown: given.to_path_buf(),
            dir: staged.dir.clone(),
            stage: staged.stage.clone(),
            committed: false,
        });
        Ok(staged)
    }

    /// Removes the folder too if nothing is committed: it was made for this command (by
    /// the caller, before [`open`](Self::open)).
    pub fn remove_folder_on_drop(&mut self) {
        self.created = true;
    }

    /// Where the command reads and writes the folder's next state.
    pub fn path(&self) -> &Path {
        &self.stage
    }

    /// The folder (its canonical path).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Puts the next state in place in one step and removes the old one.
    pub fn commit(mut self) -> Result<(), FilesError> {
        sync_fs(&self.stage)?;
        // The staging folder is locked too, so that the folder's name stays locked until
        // the old state is removed and this process lets go.
        let stage_lock = open_dir(&self.stage)?;
        flock(&stage_lock, &self.stage)?;
        let hold = interrupt::hold();
        let old = match holds_current_folder(&self.dir) {
            // Swapped, the folder a shell is in (`cd R; bbv report .`) would be the removed
            // old one: the entries move instead, one rename each.
            true => move_entries(&self.stage, &self.dir)?,
            false => exchange(&self.stage, &self.dir)?,
        };
        self.committed = true;
        set_committed(&self.stage);
        let _ = sync_fs(parent(&self.dir));
        drop(hold);
        let _ = fs::remove_dir_all(&old);
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let _ = fs::remove_dir_all(&self.stage);
        if self.created {
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

fn set_committed(stage: &Path) {
    for e in active().iter_mut().filter(|e| e.stage == stage) {
        e.committed = true;
    }
}

/// Runs `work` on `dir`'s staged next state and commits it if `work` succeeds; otherwise the
/// folder stays as it was.
pub fn update<T, E: From<FilesError>>(
    dir: &Path,
    work: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<T, E> {
    let staged = Staged::open(dir)?;
    let out = work(staged.path())?;
    staged.commit()?;
    Ok(out)
}

/// The one line a signal's message gives per folder (`None`: when no folder is being
/// written): what it holds now.
fn kept_line(sig: i32, dir: Option<&Path>, committed: bool) -> String {
    let name = interrupt::name(sig);
    match (dir, committed) {
        (None, _) => format!("bbv: stopped by {name}: no output was changed"),
        (Some(d), true) => format!(
            "bbv: stopped by {name}: {} holds this command's complete new state",
            d.display()
        ),
        (Some(d), false) => format!(
            "bbv: stopped by {name}: {} is unchanged (its previous state is kept)",
            d.display()
        ),
    }
}

/// What bbv prints when it stops on `sig`: one line per folder this command set out to write
/// (unchanged, or holding the new state), or one saying no output changed.
pub fn kept_lines(sig: i32) -> String {
    // try_lock: the signal thread must not wait on a thread it is about to end.
    let entries: Vec<Entry> = match ACTIVE.try_lock() {
        Ok(a) => a.clone(),
        Err(_) => Vec::new(),
    };
    if entries.is_empty() {
        return kept_line(sig, None, false) + "\n";
    }
    entries
        .iter()
        .map(|e| kept_line(sig, Some(&e.shown), e.committed) + "\n")
        .collect()
}

/// `text` with every staging folder of this process named as the folder it stands for: what
/// an error message shows the user.
pub fn plain(text: &str) -> String {
    let mut out = text.to_string();
    for e in active().iter() {
        out = out.replace(&*e.stage.to_string_lossy(), &e.shown.to_string_lossy());
    }
    out
}

/// `path` with a staging folder of this process at its start replaced by the folder's
/// canonical path: what a file that outlives the stage records (a trace's folder, a
/// checkpoint's).
pub fn plain_path(path: &Path) -> PathBuf {
    for e in active().iter() {
        if let Ok(rest) = path.strip_prefix(&e.stage) {
            return match rest.as_os_str().is_empty() {
                true => e.dir.clone(),
                false => e.dir.join(rest),
            };
        }
    }
    path.to_path_buf()
}

impl Staged {
    /// Where `path` is in the stage, if it is inside the folder (it need not exist yet: its
    /// nearest existing ancestor is resolved).
    pub fn within(&self, path: &Path) -> Option<PathBuf> {
        let abs = std::path::absolute(path).ok()?;
        let mut rest = Vec::new();
        let mut base = abs.as_path();
        let canonical = loop {
            if let Ok(c) = fs::canonicalize(base) {
                break c;
            }
            rest.push(base.file_name()?);
            base = base.parent()?;
        };
        let mut inside = canonical.strip_prefix(&self.dir).ok()?.to_path_buf();
        for r in rest.iter().rev() {
            inside.push(r);
        }
        Some(self.stage.join(inside))
    }
}

fn open_dir(dir: &Path) -> Result<File, FilesError> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| FilesError::io(dir, e))
}

fn flock(f: &File, dir: &Path) -> Result<(), FilesError> {
    use std::os::fd::AsRawFd;
    // SAFETY: a lock call on an open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(FilesError::io(dir, e));
    }
    let ino = f.metadata().map(|m| m.ino()).unwrap_or(0);
    let who = holder(ino)
        .map(|(pid, cmd)| format!("process {pid} ({cmd})"))
        .unwrap_or_else(|| "another process".into());
    Err(FilesError::Busy(format!(
        "{}: in use by {who}: one command at a time writes into a folder; wait for it to end, or write elsewhere",
        dir.display()
    )))
}

/// A folder held by this process for writing without staging (a suite's folder, whose jobs'
/// folders are staged by their own commands): another writer is refused as by
/// [`Staged::open`] while this lives.
#[derive(Debug)]
pub struct Locked {
    _lock: File,
}

impl Locked {
    /// Locks `dir` (which must exist).
    pub fn acquire(dir: &Path) -> Result<Locked, FilesError> {
        let (f, _) = lock(dir)?;
        Ok(Locked { _lock: f })
    }
}

/// Opens and locks `dir`, made sure to be the folder still named so (another writer may have
/// swapped it meanwhile); returns it and its canonical path.
fn lock(dir: &Path) -> Result<(File, PathBuf), FilesError> {
    for _ in 0..100 {
        let meta = fs::metadata(dir).map_err(|e| FilesError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(FilesError::Invalid(format!(
                "{}: exists and is not a folder",
                dir.display()
            )));
        }
        let canonical = fs::canonicalize(dir).map_err(|e| FilesError::io(dir, e))?;
        if canonical.parent().is_none() {
            return Err(FilesError::Invalid(format!(
                "{}: the root folder cannot be an output folder",
                dir.display()
            )));
        }
        let f = open_dir(&canonical)?;
        flock(&f, dir)?;
        let (now, held) = (fs::metadata(&canonical), f.metadata());
        if let (Ok(now), Ok(held)) = (now, held) {
            if (now.dev(), now.ino()) == (held.dev(), held.ino()) {
                return Ok((f, canonical));
            }
        }
    }
    Err(FilesError::Busy(format!(
        "{}: replaced again and again while bbv tried to lock it",
        dir.display()
    )))
}

/// The process holding a lock on inode `ino`, from /proc/locks, and its command line.
fn holder(ino: u64) -> Option<(i32, String)> {
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let pid = locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let at = f.iter().position(|w| *w == "FLOCK")?;
        let (pid, dev) = (f.get(at + 3)?, f.get(at + 4)?);
        (dev.rsplit(':').next()? == ino.to_string())
            .then(|| pid.parse::<i32>().ok())
            .flatten()
    })?;
    let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut cmd: String = String::from_utf8_lossy(&cmd)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if cmd.chars().count() > 120 {
        cmd = cmd.chars().take(117).collect::<String>() + "...";
    }
    Some((pid, cmd))
}

/// Names bbv's writers give files while they write them: left by a killed writer (the lock
/// says no live one is at work), they are not carried into the next state.
fn leftover(name: &OsStr) -> bool {
    let n = name.to_string_lossy();
    n.starts_with(".bbv-collect-")
        || (n.starts_with('.') && (n.ends_with(".partial") || n.contains(".bbv-tmp-")))
}

/// Fills `to` (an empty folder) with `from`'s entries: hard links to its files (copies where
/// the file system refuses a link), its folders made again.
fn link_tree(from: &Path, to: &Path) -> Result<(), FilesError> {
    let entries = fs::read_dir(from).map_err(|e| FilesError::io(from, e))?;
    for e in entries {
        let e = e.map_err(|e| FilesError::io(from, e))?;
        let name = e.file_name();
        if leftover(&name) {
            continue;
        }
        let (src, dst) = (e.path(), to.join(&name));
        let kind = e.file_type().map_err(|e| FilesError::io(&src, e))?;
        if kind.is_dir() {
            fs::create_dir(&dst).map_err(|e| FilesError::io(&dst, e))?;
            if let Ok(m) = fs::metadata(&src) {
                let _ = fs::set_permissions(&dst, m.permissions());
            }
            link_tree(&src, &dst)?;
        } else if fs::hard_link(&src, &dst).is_err() {
            if kind.is_symlink() {
                let target = fs::read_link(&src).map_err(|e| FilesError::io(&src, e))?;
                std::os::unix::fs::symlink(target, &dst).map_err(|e| FilesError::io(&dst, e))?;
            } else {
                fs::copy(&src, &dst).map_err(|e| FilesError::io(&src, e))?;
            }
        }
    }
    Ok(())
}

/// Flushes the file system `dir` is on to disk: the stage's new files and folders before the
/// swap, the swap itself after it. One `syncfs` commits the journal once, where an `fsync` per
/// file committed it per file (a `bbv regions` writes a dozen: 1-5 ms against 0.2 ms here).
fn sync_fs(dir: &Path) -> Result<(), FilesError> {
    use std::os::fd::AsRawFd;
    let d = open_dir(dir)?;
    // SAFETY: a sync of the file system of an open descriptor.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(FilesError::io(dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn c_path(p: &Path) -> Result<CString, FilesError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| FilesError::Invalid(format!("{}: a NUL in the name", p.display())))
}

/// The name the old state has in the two-rename fallback: `.NAME.bbv-PID.old`.
fn old_name(dir: &Path) -> PathBuf {
    parent(dir).join(format!("{}.old", interrupt::tagged(&prefix(dir))))
}

/// Puts `stage` at `dir` in one step; returns where the old state is now.
fn exchange(stage: &Path, dir: &Path) -> Result<PathBuf, FilesError> {
    let (a, b) = (c_path(stage)?, c_path(dir)?);
    // SAFETY: two valid NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(stage.to_path_buf());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
        return Err(FilesError::io(dir, e));
    }
    // No exchange on this file system: the old state steps aside under a name the next open
    // restores from if bbv dies before the second rename.
    let old = old_name(dir);
    fs::rename(dir, &old).map_err(|e| FilesError::io(dir, e))?;
    if let Err(e) = fs::rename(stage, dir) {
        let _ = fs::rename(&old, dir);
        return Err(FilesError::io(dir, e));
    }
    Ok(old)
}

/// Whether this process's current folder is `dir` or inside it.
fn holds_current_folder(dir: &Path) -> bool {
    std::env::current_dir()
        .and_then(fs::canonicalize)
        .is_ok_and(|cwd| cwd.starts_with(dir))
}

/// Puts the stage's entries in `dir` one by one (the folder itself stays); what only the old
/// state had goes. Returns the stage, now holding the old entries, for removal.
fn move_entries(stage: &Path, dir: &Path) -> Result<PathBuf, FilesError> {
    let old = stage.join(".bbv-old");
    fs::create_dir(&old).map_err(|e| FilesError::io(&old, e))?;
    let names = |d: &Path| -> Result<Vec<OsString>, FilesError> {
        let entries = fs::read_dir(d).map_err(|e| FilesError::io(d, e))?;
        Ok(entries.flatten().map(|e| e.file_name()).collect())
    };
    let new = names(stage)?;
    for name in names(dir)? {
        let keep_file = fs::symlink_metadata(stage.join(&name)).is_ok_and(|m| !m.is_dir());
        if !keep_file {
            // A folder (or an entry the new state drops) steps aside: rename cannot replace
            // a folder that is not empty.
            fs::rename(dir.join(&name), old.join(&name)).map_err(|e| FilesError::io(dir, e))?;
        }
    }
    for name in new.iter().filter(|n| n.as_os_str() != ".bbv-old") {
        fs::rename(stage.join(name), dir.join(name)).map_err(|e| FilesError::io(dir, e))?;
    }
    Ok(stage.to_path_buf())
}

/// Where a writer died between the fallback's two renames, the folder is missing and its old
/// state waits beside it: put it back.
fn restore_orphan(dir: &Path) {
    if fs::symlink_metadata(dir).is_ok() {
        return;
    }
    let Some(name) = dir.file_name() else {
        return;
    };
    let parent = match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("."),
    };
    let pre = prefix(dir);
    let Ok(entries) = fs::read_dir(&parent) else {
        return;
    };
    for e in entries.flatten() {
        let n: OsString = e.file_name();
        let n = n.to_string_lossy();
        if let Some(pid) = n
            .strip_prefix(&pre)
            .and_then(|r| r.strip_suffix(".old"))
            .and_then(|r| r.trim_end_matches('-').parse::<i32>().ok())
        {
            if interrupt::gone(pid) && !name.is_empty() {
                let _ = fs::rename(e.path(), dir);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
