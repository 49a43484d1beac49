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
//! * with `record=PATH`, ChampSim records of every instruction thread 1 runs, and with
//!   `trace=FILE` those of a replay's windows (see [`record`]).
//! * with `checkpoint=FILE`, the process's state at capture events (see [`checkpoint`]).
//! * with `flow=Q`, threads advance in step (see [`flow`]).
//! * with `turns=Q`, threads take turns in an order that depends only on the guest, and
//!   `schedule` lists what the order could not follow (see [`turns`]).
//! * with `metrics=on` (`l1d=S:W:L`, `l2=S:W:L`, `metrics_thread=off`), `metrics`: one row of
//!   per-interval metrics per cut of thread 1 (see [`metrics`] and [`offload`]).
//!
//! Everything is on disk or in the page cache at every moment, so the host can complete the
//! files (closing comment, `--tail`) even when QEMU dies by a signal without telling plugins.
//!
//! # Design constraints
//! * Plugin API v1 (QEMU 7.2, what Debian ships) has no per-vCPU scoreboards and no
//!   conditional callbacks; v3 (QEMU 9.1+) has both but no inline add to a plain address. The
//!   API-specific calls live in `ffi` (and `fast::board`), one build per level.
//! * Threads are numbered in creation order (QEMU 9+: as they first run; 1 = main thread),
//!   never by QEMU's reusable vCPU index.
//! * Blocks are keyed by (mapped file, file offset), so ids do not depend on load addresses.
//! * Nothing may panic across the C boundary: bad arguments are reported in `DIR/error`, and a
//!   panic anywhere is written there too and ends QEMU before it unwinds ([`guard`]).
//! * Guests close fd 2 before exiting, so nothing is printed; everything goes to files.

#![cfg_attr(test, allow(dead_code))]

#[cfg(not(test))]
mod ffi;
/// Unit tests run without QEMU, which provides the qemu_plugin_* symbols at load time.
#[cfg(test)]
mod ffi {
    use std::sync::atomic::AtomicBool;
    pub(crate) static INLINE: AtomicBool = AtomicBool::new(false);
    pub(crate) fn request_reset() {}
    pub(crate) fn request_reset_with(_: extern "C" fn(qemu_plugin::sys::qemu_plugin_id_t)) {}
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
mod checkpoint;
mod fast;
mod feed;
mod flow;
mod fork;
mod guard;
mod maplog;
mod metrics;
mod model;
mod offload;
#[cfg(not(test))]
mod plugin;
mod record;
mod replay;
mod slices;
mod state;
mod syscall_log;
mod thread;
mod turns;
mod watch;

use std::sync::OnceLock;

use bbv_plugin_contract::{files, Isa, MetricsConfig, PluginConfig};

/// What the host asked for (the plugin arguments, as `bbv_plugin_contract` spells them) and
/// what QEMU says of the guest.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The host's request.
    pub host: PluginConfig,
    /// The guest's ISA, where ChampSim records can be made of it.
    pub isa: Option<Isa>,
    /// The guest is x86 (32 or 64 bit; `isa` names x86-64 only).
    pub x86: bool,
}

impl Config {
    /// Whether the guest is `isa`.
    pub fn is(&self, isa: Isa) -> bool {
        self.isa == Some(isa)
    }

    /// Per-interval metrics asked for.
    pub fn metrics(&self) -> bool {
        self.host.metrics.is_some()
    }

    /// The metrics' settings (their defaults when metrics are off).
    pub fn model(&self) -> MetricsConfig {
        self.host.metrics.unwrap_or_default()
    }
}

pub(crate) static CONFIG: OnceLock<Config> = OnceLock::new();

/// Parses the plugin arguments for QEMU's `target` (`x86_64-linux-user`, ...).
pub(crate) fn parse_args(raw: &[String], target: &str) -> Result<Config, String> {
    let host = PluginConfig::parse(raw)?;
    if (host.record.is_some() || host.trace.is_some()) && Isa::of_target(target).is_none() {
        return Err(format!(
            "ChampSim records (record=, trace=) are made of x86-64, AArch64 and RISC-V 64 guests only, not {target}"
        ));
    }
    if host.checkpoint.is_some() && (host.markers.is_none() || !target.starts_with("x86_64")) {
        return Err(format!(
            "checkpoint=FILE needs markers=FILE and an x86-64 guest, not {target}"
        ));
    }
    if host.trace.is_some() && (host.markers.is_none() || host.record.is_some()) {
        return Err("trace=FILE needs markers=FILE, and excludes record=PATH".into());
    }
    Ok(Config {
        host,
        isa: Isa::of_target(target),
        x86: target.starts_with("x86_64") || target.starts_with("i386"),
    })
}

/// Records a failure where the host will find it (stderr may be closed or the guest's).
pub(crate) fn report_error(msg: &str) {
    if fork::forked() {
        return;
    }
    if let Some(cfg) = CONFIG.get() {
        let _ = bbv_files::write_atomic(&cfg.host.dir.join(files::ERROR), msg.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments_and_the_guest() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let c = parse_args(&args(&["dir=/tmp/x", "interval=5"]), "x86_64-linux-user").unwrap();
        assert!(c.x86 && !c.is(Isa::Aarch64) && c.host.interval == 5 && !c.metrics());
        let c = parse_args(&args(&["dir=a", "metrics", "l1d=16K:4:64"]), "x86_64").unwrap();
        assert!(c.metrics() && c.model().l1d.size == 16384);
        let c = parse_args(&args(&["dir=a"]), "aarch64-linux-user").unwrap();
        assert!(c.is(Isa::Aarch64) && !c.x86 && c.host.interval == 100_000_000);
        assert!(parse_args(&args(&["dir=a", "colour=red"]), "x86_64").is_err());
        assert!(parse_args(&args(&["dir=a", "record=/tmp/r"]), "x86_64").is_ok());
        assert!(parse_args(&args(&["dir=a", "record=/tmp/r"]), "aarch64").is_ok());
        assert!(parse_args(&args(&["dir=a", "record=/tmp/r"]), "riscv64").is_ok());
        assert!(parse_args(&args(&["dir=a", "record=/tmp/r"]), "i386").is_err());
        let traced = ["dir=a", "markers=/tmp/m", "trace=/tmp/t"];
        assert!(parse_args(&args(&traced), "x86_64").is_ok());
        assert!(parse_args(&args(&traced[..1]), "x86_64").is_ok());
        assert!(parse_args(&args(&["dir=a", "trace=/tmp/t"]), "x86_64").is_err());
        assert!(parse_args(
            &args(&["dir=a", "markers=/m", "trace=/t", "record=/r"]),
            "x86_64"
        )
        .is_err());
    }
}
