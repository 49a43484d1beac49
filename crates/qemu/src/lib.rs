//! bbv-qemu: the QEMU user-mode TCG plugin behind `bbv collect`.
//!
//! QEMU loads this library with `-plugin libbbv_qemu.so,dir=DIR,interval=N,...`. The plugin
//! counts executed translation blocks per guest thread, cuts each thread's run into intervals and
//! writes, into `DIR` (a private directory of the host-side `bbv-collect`):
//! * `thread.N.bb`: thread N's completed intervals in exp-bbv's format, one write per vector,
//! * `thread.N.state`: thread N's totals and unfinished interval, a shared mapping ([`state`]),
//! * `blocks`: the block table (modules, then id, module, file offset, address, instructions),
//!   one line per write as blocks are first translated.
//!
//! * `thread.N.marks`: with `watch=W`, one line per interval cut of thread N: the cut's index
//!   and instruction count, then `id:delta` for the first execution of each block in the W
//!   instructions after it (the candidates for the (PC, count) markers of `bbv regions`),
//! * with `markers=FILE` (`bbv replay`), `events`: one line per marker reached ([`replay`]).
//! * with `slices=N`, once a second thread runs: `slices` (the global slice boundaries) and
//!   `thread.N.slices` (each thread's vector per slice), see [`slices`].
//!
//! * with `flow=Q`, threads advance in step (see [`flow`]).
//! * with `metrics=on` (`l1d=S:W:L`, `l2=S:W:L`, `metrics_thread=off`), `metrics`: one row of
//!   per-interval metrics per cut of thread 1 (see [`metrics`] and [`offload`]).
//!
//! Everything is on disk or in the page cache at every moment, so the host can complete the
//! files (closing comment, `--tail`) even when QEMU dies by a signal without telling plugins.
//!
//! # Design constraints
//! * Plugin API v1 (QEMU 7.2, what Debian ships) has no per-vCPU scoreboards and no
//!   conditional callbacks; v3 (QEMU 9.1+) has both but no inline add to a plain address. The
//!   API-specific calls live in [`api`] (and `fast::board`), one build per level.
//! * Threads are numbered in creation order (QEMU 9+: as they first run; 1 = main thread),
//!   never by QEMU's reusable vCPU index.
//! * Blocks are keyed by (mapped file, file offset), so ids do not depend on load addresses.
//! * Nothing may panic across the C boundary: bad arguments are reported in `DIR/error`.
//! * Guests close fd 2 before exiting, so nothing is printed; everything goes to files.

#![cfg_attr(test, allow(dead_code))]

#[cfg(not(test))]
mod api;
/// Unit tests run without QEMU, which provides the qemu_plugin_* symbols at load time.
#[cfg(test)]
mod api {
    use std::sync::atomic::AtomicBool;
    pub(crate) static INLINE: AtomicBool = AtomicBool::new(false);
    pub(crate) fn request_reset() {}
    pub(crate) struct Insn<'a> {
        pub vaddr: u64,
        pub bytes: &'a [u8],
    }
    impl Insn<'_> {
        pub fn disas(&self) -> String {
            String::new()
        }
    }
}
mod blocks;
mod cache;
mod decode;
mod fast;
mod flow;
mod fork;
mod maplog;
mod maps;
mod metrics;
mod offload;
mod replay;
mod slices;
mod state;
mod thread;
mod x86;

use std::path::PathBuf;
use std::sync::OnceLock;

/// What the host asked for, parsed from the plugin arguments.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub dir: PathBuf,
    pub interval: u64,
    pub exact: bool,
    pub count_only: bool,
    pub tail: bool,
    pub x86: bool,
    pub aarch64: bool,
    pub riscv64: bool,
    /// Count every QEMU execution of a rep string instruction (gem5's and Pin's rule) instead
    /// of once per instance (exp-bbv's).
    pub rep_iterations: bool,
    /// Instructions after each cut during which the blocks run are recorded as marker
    /// candidates (0 = none).
    pub watch: u64,
    /// Replay: the marker file to watch (see [`replay`]).
    pub markers: Option<PathBuf>,
    /// Multi-threaded slices of this many filtered instructions per thread that ran (0 = none;
    /// see [`slices`]).
    pub slices: u64,
    /// Image file-name prefixes whose instructions do not count toward slices.
    pub exclude: Vec<String>,
    /// Flow control: no running thread more than this many instructions ahead of the slowest
    /// (0 = none; see [`flow`]).
    pub flow: u64,
    /// Per-interval metrics (see [`metrics`]), with these cache geometries.
    pub metrics: bool,
    /// Thread 1's cache model runs on a model thread of its own while it is the only thread.
    pub metrics_thread: bool,
    /// The metrics' callbacks are registered as usual but return at once (`metrics_calls=empty`):
    /// what QEMU's calling them costs by itself, the floor under any metrics run (`bbv bench
    /// collect`). The metrics file then counts only the blocks that also check for a cut.
    pub metrics_calls_only: bool,
    /// Once slicing begins, the metrics' rows are cut at the slices' boundaries instead of
    /// thread 1's intervals (`metrics_rows=slices`), so that they line up with the slices the
    /// host clusters for `--regions looppoint`.
    pub metrics_slices: bool,
    pub l1d: bbv_profile::CacheGeometry,
    pub l2: bbv_profile::CacheGeometry,
}

pub(crate) static CONFIG: OnceLock<Config> = OnceLock::new();

/// Parses `key=value` plugin arguments; unknown keys are errors so a host/plugin mismatch is caught.
pub(crate) fn parse_args(raw: &[String], target: &str) -> Result<Config, String> {
    let mut cfg = Config {
        dir: PathBuf::new(),
        interval: 100_000_000,
        exact: false,
        count_only: false,
        tail: false,
        x86: target.starts_with("x86_64") || target.starts_with("i386"),
        aarch64: target.starts_with("aarch64"),
        riscv64: target.starts_with("riscv64"),
        rep_iterations: false,
        watch: 0,
        markers: None,
        slices: 0,
        exclude: Vec::new(),
        flow: 0,
        metrics: false,
        metrics_thread: true,
        metrics_calls_only: false,
        metrics_slices: false,
        l1d: bbv_profile::CacheGeometry::L1D,
        l2: bbv_profile::CacheGeometry::L2,
    };
    let flag = |k: &str, v: &str| match v {
        "on" | "yes" | "true" => Ok(true),
        "off" | "no" | "false" => Ok(false),
        _ => Err(format!("plugin argument {k}={v}: expected on or off")),
    };
    // A two-valued argument: false for `off`, true for `on`.
    let choice = |k: &str, v: &str, off: &str, on: &str| match v {
        _ if v == on => Ok(true),
        _ if v == off => Ok(false),
        _ => Err(format!("plugin argument {k}={v}: expected {off} or {on}")),
    };
    for arg in raw {
        let (k, v) = arg.split_once('=').unwrap_or((arg.as_str(), "on"));
        match k {
            "dir" => cfg.dir = PathBuf::from(v),
            "interval" => {
                cfg.interval = v.parse().ok().filter(|&n: &u64| n > 0).ok_or_else(|| {
                    format!("plugin argument interval={v}: expected a positive integer")
                })?
            }
            "exact" => cfg.exact = flag(k, v)?,
            "count_only" => cfg.count_only = flag(k, v)?,
            "tail" => cfg.tail = flag(k, v)?,
            "metrics" => cfg.metrics = flag(k, v)?,
            "metrics_thread" => cfg.metrics_thread = flag(k, v)?,
            "metrics_rows" => cfg.metrics_slices = choice(k, v, "intervals", "slices")?,
            "metrics_calls" => cfg.metrics_calls_only = choice(k, v, "full", "empty")?,
            "l1d" => cfg.l1d = metrics::geometry(k, v)?,
            "l2" => cfg.l2 = metrics::geometry(k, v)?,
            "count_rep" => cfg.rep_iterations = choice(k, v, "instance", "iteration")?,
            "watch" => {
                cfg.watch = v
                    .parse()
                    .map_err(|_| format!("plugin argument watch={v}: expected a whole number"))?
            }
            "markers" => cfg.markers = Some(PathBuf::from(v)),
            "slices" => {
                cfg.slices = v
                    .parse()
                    .map_err(|_| format!("plugin argument slices={v}: expected a whole number"))?
            }
            "flow" => {
                cfg.flow = v
                    .parse()
                    .map_err(|_| format!("plugin argument flow={v}: expected a whole number"))?
            }
            // Colon-separated: QEMU splits plugin arguments at commas.
            "exclude" => {
                cfg.exclude = v
                    .split(':')
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect()
            }
            _ => return Err(format!("unknown plugin argument {arg}")),
        }
    }
    if cfg.l1d.line != cfg.l2.line {
        return Err(format!(
            "plugin arguments l1d and l2: line sizes {} and {} differ",
            cfg.l1d.line, cfg.l2.line
        ));
    }
    if cfg.dir.as_os_str().is_empty() {
        return Err("plugin argument dir=DIR is required".into());
    }
    Ok(cfg)
}

/// Records a failure where the host will find it (stderr may be closed or the guest's).
pub(crate) fn report_error(msg: &str) {
    if fork::forked() {
        return;
    }
    if let Some(cfg) = CONFIG.get() {
        let _ = bbv_files::write_atomic(&cfg.dir.join("error"), msg.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let c = parse_args(
            &args(&[
                "dir=/tmp/x",
                "interval=5",
                "exact=on",
                "tail",
                "count_rep=iteration",
            ]),
            "x86_64-linux-user",
        )
        .unwrap();
        assert_eq!(
            (
                c.interval,
                c.exact,
                c.tail,
                c.count_only,
                c.x86,
                c.rep_iterations
            ),
            (5, true, true, false, true, true)
        );
        assert!(parse_args(&args(&["dir=a", "count_rep=some"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "watch=-1"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "flow=fast"]), "x86_64").is_err());
        assert_eq!(
            parse_args(&args(&["dir=a", "flow=1000"]), "x86_64")
                .unwrap()
                .flow,
            1000
        );
        assert!(
            parse_args(&args(&["interval=5"]), "x86_64").is_err(),
            "dir is required"
        );
        assert!(parse_args(&args(&["dir=a", "interval=0"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "exact=maybe"]), "x86_64").is_err());
        let c = parse_args(&args(&["dir=a", "metrics", "l1d=16K:4:64"]), "x86_64").unwrap();
        assert!(c.metrics && c.l1d.size == 16384 && c.l2 == bbv_profile::CacheGeometry::L2);
        assert!(parse_args(&args(&["dir=a", "l1d=48K:12:64"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "l2=1M:16:128"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "colour=red"]), "x86_64").is_err());
        let c = parse_args(&args(&["dir=a"]), "aarch64-linux-user").unwrap();
        assert!(c.aarch64 && !c.x86 && c.interval == 100_000_000);
    }
}
