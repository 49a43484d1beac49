use super::*;
use std::collections::BTreeMap;

/// Every file under `dir` with its contents (folders as names ending in `/`).
fn state(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.insert(rel + "/", String::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn old_run(root: &Path) -> PathBuf {
    let d = root.join("o");
    fs::create_dir_all(d.join("sub")).unwrap();
    fs::write(d.join("a"), "old a").unwrap();
    fs::write(d.join("b"), "old b").unwrap();
    fs::write(d.join("sub/c"), "old c").unwrap();
    d
}

/// The new state is built beside the old, which no write touches, and swapped in whole.
#[test]
fn a_commit_swaps_the_whole_state_in() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    let before = state(&d);
    let s = Staged::open(&d).unwrap();
    assert_eq!(state(s.path()), before, "the stage starts as the folder");
    crate::write_atomic(&s.path().join("a"), b"new a").unwrap();
    crate::write_atomic(&s.path().join("sub/c"), b"new c").unwrap();
    fs::remove_file(s.path().join("b")).unwrap();
    fs::write(s.path().join("d"), "new d").unwrap();
    assert_eq!(state(&d), before, "nothing changes before the commit");
    s.commit().unwrap();
    let after = state(&d);
    assert_eq!(after["a"], "new a");
    assert_eq!(after["sub/c"], "new c");
    assert_eq!(after["d"], "new d");
    assert!(!after.contains_key("b"));
    assert_eq!(names(t.path()), ["o"], "nothing left beside it");
}

/// Dropped without a commit (an error, a signal): the folder is as it was, and one this
/// command made goes again.
#[test]
fn no_commit_leaves_the_old_state() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    let before = state(&d);
    let s = Staged::open(&d).unwrap();
    crate::write_atomic(&s.path().join("a"), b"new a").unwrap();
    drop(s);
    assert_eq!(state(&d), before);
    assert_eq!(names(t.path()), ["o"]);
    let fresh = t.path().join("fresh");
    let r: Result<(), FilesError> = update(&fresh, |p| {
        fs::write(p.join("x"), "x").unwrap();
        Err(FilesError::Invalid("failed".into()))
    });
    assert!(r.is_err());
    assert!(!fresh.exists(), "a folder made for nothing goes");
    update(&fresh, |p| crate::write_atomic(&p.join("x"), b"x")).unwrap();
    assert_eq!(fs::read_to_string(fresh.join("x")).unwrap(), "x");
}

/// A second writer is refused at once, told who holds the folder.
#[test]
fn one_writer_at_a_time() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    let s = Staged::open(&d).unwrap();
    let err = Staged::open(&d).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FilesError::Busy(_)), "{msg}");
    assert!(
        msg.contains(&format!("process {}", std::process::id())),
        "{msg}"
    );
    drop(s);
    Staged::open(&d).unwrap().commit().unwrap();
    // A folder held without staging keeps writers out likewise, and lets them in after.
    let held = Locked::acquire(&d).unwrap();
    assert!(matches!(Staged::open(&d), Err(FilesError::Busy(_))));
    assert!(matches!(Locked::acquire(&d), Err(FilesError::Busy(_))));
    drop(held);
    Locked::acquire(&d).unwrap();
}

/// What killed writers left goes: their stages beside the folder, their temporaries in it;
/// a folder they left half-renamed comes back.
#[test]
fn leftovers_of_dead_writers_go() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    // Above Linux's largest pid (2^22): no such process.
    let dead = t.path().join(".o.bbv-99999999-.next");
    fs::create_dir(&dead).unwrap();
    fs::write(d.join(".a.bbv-tmp-99999999"), "t").unwrap();
    fs::write(d.join("sub/.c.99999999.partial"), "t").unwrap();
    fs::create_dir(d.join(".bbv-collect-99999999-x")).unwrap();
    Staged::open(&d).unwrap().commit().unwrap();
    assert_eq!(names(t.path()), ["o"]);
    assert_eq!(names(&d), ["a", "b", "sub"]);
    assert_eq!(names(&d.join("sub")), ["c"]);
    // Killed between the fallback's two renames.
    let before = state(&d);
    fs::rename(&d, t.path().join(".o.bbv-99999999-.old")).unwrap();
    let s = Staged::open(&d).unwrap();
    assert_eq!(state(&d), before);
    drop(s);
    assert_eq!(names(t.path()), ["o"]);
}

/// Messages name the folder, not its stage; a file is not a folder.
#[test]
fn messages_name_the_folder() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    let s = Staged::open(&d).unwrap();
    let msg = format!("{}/a: broken", s.path().display());
    assert_eq!(plain(&msg), format!("{}/a: broken", d.display()));
    let err = Staged::open(&d.join("a")).unwrap_err().to_string();
    assert!(err.contains("is not a folder"), "{err}");
    assert_eq!(
        kept_line(libc::SIGTERM, Some(Path::new("o")), false),
        "bbv: stopped by SIGTERM: o is unchanged (its previous state is kept)"
    );
}

/// The folder a shell is in keeps its identity: the new entries move in one by one, folders
/// and dropped entries of the old state step aside.
#[test]
fn entries_move_into_a_folder_in_use() {
    let t = tempfile::tempdir().unwrap();
    let d = old_run(t.path());
    let s = Staged::open(&d).unwrap();
    crate::write_atomic(&s.path().join("a"), b"new a").unwrap();
    crate::write_atomic(&s.path().join("sub/c"), b"new c").unwrap();
    fs::remove_file(s.path().join("b")).unwrap();
    let (stage, dir) = (s.path().to_path_buf(), s.dir().to_path_buf());
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let before = ino(&dir);
    let old = move_entries(&stage, &dir).unwrap();
    assert_eq!(ino(&dir), before);
    let after = state(&d);
    assert_eq!(after["a"], "new a");
    assert_eq!(after["sub/c"], "new c");
    assert!(!after.contains_key("b"));
    assert_eq!(state(&old.join(".bbv-old"))["b"], "old b");
}
