use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shared data folder (`../shared/data` beside the repository).
pub fn data_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    assert!(
        dir.is_dir(),
        "{} is missing: the tests read SimPoint 3.2's golden outputs from there",
        dir.display()
    );
    dir
}

pub fn bbv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bbv"))
}

pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    bbv()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("bbv runs")
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `bbv OPTS -o OUT -- gzip -6 -c INPUT` (a `run` or `replay` of a real program), its own
/// output dropped; it must exit 0. It runs in a fixed environment: the guest's instruction
/// stream, and so the points chosen, depend on the size of its environment, which would
/// otherwise be the test runner's.
pub fn gzip_job(opts: &[&str], out: &Path, input: &Path) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = opts.iter().map(std::ffi::OsStr::new).collect();
    args.extend([std::ffi::OsStr::new("-o"), out.as_os_str()]);
    gzip_bbv(&args, input)
}

/// `bbv ARGS -- gzip -6 -c INPUT` in [`gzip_job`]'s fixed environment; it must exit 0.
pub fn gzip_bbv(args: &[&std::ffi::OsStr], input: &Path) -> Output {
    let o = bbv()
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/tmp")
        .env("LANG", "C")
        .args(args)
        .args(["--", "gzip", "-6", "-c"])
        .arg(input)
        .stdout(std::process::Stdio::null())
        .output()
        .expect("bbv runs");
    assert_status(&o, 0);
    o
}

/// A JSON file's content.
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts a command's exit status, showing its stderr when it differs.
pub fn assert_status(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON report `bbv replay --json` prints at the end of stdout, after the guest's own
/// output.
pub fn replay_report(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let at = stdout
        .rfind("{\"regions\":")
        .expect("a JSON report at the end");
    serde_json::from_str(stdout[at..].trim_end()).unwrap()
}

/// A text file of `bytes` pseudo-random hex words (compressible, like real text).
pub fn text_input(path: &Path, bytes: usize) {
    let words: Vec<String> = (0..3000u64)
        .map(|i| format!("{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40))
        .collect();
    let mut text = String::new();
    let mut x = 777u64;
    while text.len() < bytes {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&words[(x >> 33) as usize % words.len()]);
        text.push(if x & 15 == 0 { '\n' } else { ' ' });
    }
    std::fs::write(path, text).unwrap();
}

/// A writable copy of the folder `from` (the shared data is read-only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
            let mut perm = std::fs::metadata(&dest).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            std::fs::set_permissions(&dest, perm).unwrap();
        }
    }
}

/// Every regular file under `dir` (folders searched, links not followed) and its content.
pub fn contents(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            out.extend(contents(&p));
        } else if meta.is_file() {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

/// The folder a build script of the repository prints (it builds once, then reuses).
pub fn built_by(script: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let out = Command::new(path)
        .output()
        .unwrap_or_else(|e| panic!("scripts/{script} does not run: {e}"));
    assert!(
        out.status.success(),
        "scripts/{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The folder of ChampSim and champsim-branches (scripts/champsim builds them once).
pub fn champsim_bin() -> PathBuf {
    built_by("champsim")
}

/// Gives a guest's command a fixed environment (PATH, HOME, LANG): the guest's instruction
/// stream, and so the points chosen, depend on the size of its environment, which would
/// otherwise be the test runner's (different between runs of a test). HOME stays the user's,
/// where bbv finds QEMU 10 and ChampSim.
pub fn guest_env(c: &mut Command) -> &mut Command {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("LANG", "C")
}

/// The plugin's ChampSim records of a whole run of `guest` (QEMU started by hand as bbv starts
/// it, in [`guest_env`]'s environment) in `out`, with extra plugin arguments; the run's state
/// folder is `out`'s sibling.
pub fn record_whole_run(guest: &[String], out: &Path, extra: &str) {
    let plugin = Path::new(env!("CARGO_BIN_EXE_bbv")).with_file_name("libbbv_qemu.so");
    let state = out.with_extension("state");
    std::fs::create_dir(&state).unwrap();
    let arg = format!(
        "{}{extra},record={},dir={}",
        plugin.display(),
        out.display(),
        state.display()
    );
    let q = guest_env(&mut Command::new("qemu-x86_64"))
        .args(["-plugin", &arg])
        .args(guest)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    assert!(!state.join("error").exists());
}

/// Processes whose command line contains `tag` (a zombie's is empty).
pub fn processes_with(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(tag) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}
