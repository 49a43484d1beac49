//! The plugin's configuration, and its spelling as QEMU plugin arguments.

use std::path::PathBuf;

use bbv_profile::CacheGeometry;

/// The metrics' cache model (`metrics=on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The L1 data cache (`l1d=SIZE:WAYS:LINE`).
    pub l1d: CacheGeometry,
    /// The L2 cache (`l2=SIZE:WAYS:LINE`), with the L1D's line size.
    pub l2: CacheGeometry,
    /// Thread 1's model runs on a thread of its own while it is the only thread
    /// (`metrics_thread=off` turns it off).
    pub own_thread: bool,
    /// The callbacks are registered as usual but return at once (`metrics_calls=empty`):
    /// what QEMU's calling them costs by itself (`bbv bench collect`).
    pub calls_only: bool,
    /// Once slicing begins, rows are cut at the slices' boundaries instead of thread 1's
    /// intervals (`metrics_rows=slices`), to line up with the slices `--regions looppoint`
    /// clusters.
    pub slice_rows: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            l1d: CacheGeometry::L1D,
            l2: CacheGeometry::L2,
            own_thread: true,
            calls_only: false,
            slice_rows: false,
        }
    }
}

/// What the host asks the plugin for. Each field is one `key=value` argument, written only
/// when it differs from its default (`dir` always).
#[derive(Clone, Debug, PartialEq)]
pub struct PluginConfig {
    /// The plugin's private directory, where it writes every file ([`crate::files`]).
    pub dir: PathBuf,
    /// Instructions per interval (`interval=N`).
    pub interval: u64,
    /// Cut exactly at the interval size, splitting a block (`exact=on`).
    pub exact: bool,
    /// Only count instructions (`count_only=on`).
    pub count_only: bool,
    /// Also keep the last, partial interval (`tail=on`).
    pub tail: bool,
    /// Count every execution of a rep string instruction (gem5's and Pin's rule) instead of
    /// once per instance (`count_rep=iteration`).
    pub rep_iterations: bool,
    /// Instructions after each cut during which the blocks run are recorded as marker
    /// candidates (`watch=W`; 0 = none).
    pub watch: u64,
    /// Replay: the marker file to watch (`markers=FILE`).
    pub markers: Option<PathBuf>,
    /// Slices of this many filtered instructions per thread that ran (`slices=N`; 0 = none).
    pub slices: u64,
    /// Image file-name prefixes whose instructions do not count toward slices
    /// (`exclude=A:B`: QEMU splits plugin arguments at commas).
    pub exclude: Vec<String>,
    /// No running thread more than this many instructions ahead of the slowest (`flow=Q`;
    /// 0 = none).
    pub flow: u64,
    /// Deterministic turns: one thread runs guest code at a time, for this many instructions
    /// per turn, in an order that depends only on the guest (`turns=Q`; 0 = the host's
    /// schedule).
    pub turns: u64,
    /// Per-interval metrics and their cache model.
    pub metrics: Option<MetricsConfig>,
    /// ChampSim records of every instruction thread 1 runs, written to this file or pipe
    /// (`record=PATH`; x86-64 guests).
    pub record: Option<PathBuf>,
    /// ChampSim records of a replay's windows (`trace=FILE`; x86-64 guests): FILE's lines are
    /// `window ID START_EVENT ALT_EVENT END_EVENT TAIL PATH`; thread 1's records from the
    /// instruction where marker event START_EVENT or ALT_EVENT fires (the first of them) to the
    /// one before END_EVENT's, then TAIL more, go to PATH (a file or a pipe, opened when the
    /// window starts). Needs `markers`.
    pub trace: Option<PathBuf>,
    /// Checkpoints of the guest process (`checkpoint=FILE`; x86-64 guests, plugin API v3):
    /// FILE's lines are `capture EVENT`; when marker event EVENT fires on the only thread, the
    /// plugin writes the process's registers, memory and kernel-visible state
    /// ([`crate::checkpoint`]). Needs `markers`.
    pub checkpoint: Option<PathBuf>,
    /// Thread 1's system calls among the marker events (`syscalls=on`; the `syscalls` file,
    /// [`crate::syscalls`]). Needs `markers`.
    pub syscalls: bool,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            dir: PathBuf::new(),
            interval: 100_000_000,
            exact: false,
            count_only: false,
            tail: false,
            rep_iterations: false,
            watch: 0,
            markers: None,
            slices: 0,
            exclude: Vec::new(),
            flow: 0,
            turns: 0,
            metrics: None,
            record: None,
            trace: None,
            checkpoint: None,
            syscalls: false,
        }
    }
}

fn flag(k: &str, v: &str) -> Result<bool, String> {
    match v {
        "on" | "yes" | "true" => Ok(true),
        "off" | "no" | "false" => Ok(false),
        _ => Err(format!("plugin argument {k}={v}: expected on or off")),
    }
}

/// A two-valued argument: false for `off`, true for `on`.
fn choice(k: &str, v: &str, off: &str, on: &str) -> Result<bool, String> {
    match v {
        _ if v == on => Ok(true),
        _ if v == off => Ok(false),
        _ => Err(format!("plugin argument {k}={v}: expected {off} or {on}")),
    }
}

fn whole(k: &str, v: &str) -> Result<u64, String> {
    v.parse()
        .map_err(|_| format!("plugin argument {k}={v}: expected a whole number"))
}

fn geometry(k: &str, v: &str) -> Result<CacheGeometry, String> {
    CacheGeometry::parse(v).map_err(|e| format!("plugin argument {k}: {e}"))
}

impl PluginConfig {
    /// The `key=value` arguments, in a fixed order, `dir` last.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![format!("interval={}", self.interval)];
        for (key, on) in [
            ("exact", self.exact),
            ("count_only", self.count_only),
            ("tail", self.tail),
            ("syscalls", self.syscalls),
        ] {
            if on {
                a.push(format!("{key}=on"));
            }
        }
        if self.rep_iterations {
            a.push("count_rep=iteration".into());
        }
        if self.watch > 0 {
            a.push(format!("watch={}", self.watch));
        }
        if self.slices > 0 {
            a.push(format!("slices={}", self.slices));
        }
        if !self.exclude.is_empty() {
            a.push(format!("exclude={}", self.exclude.join(":")));
        }
        if self.flow > 0 {
            a.push(format!("flow={}", self.flow));
        }
        if self.turns > 0 {
            a.push(format!("turns={}", self.turns));
        }
        if let Some(m) = &self.metrics {
            a.push("metrics=on".into());
            a.push(format!("l1d={}", m.l1d.plugin_arg()));
            a.push(format!("l2={}", m.l2.plugin_arg()));
            if !m.own_thread {
                a.push("metrics_thread=off".into());
            }
            if m.calls_only {
                a.push("metrics_calls=empty".into());
            }
            if m.slice_rows {
                a.push("metrics_rows=slices".into());
            }
        }
        if let Some(m) = &self.markers {
            a.push(format!("markers={}", m.display()));
        }
        if let Some(r) = &self.record {
            a.push(format!("record={}", r.display()));
        }
        if let Some(t) = &self.trace {
            a.push(format!("trace={}", t.display()));
        }
        if let Some(c) = &self.checkpoint {
            a.push(format!("checkpoint={}", c.display()));
        }
        a.push(format!("dir={}", self.dir.display()));
        a
    }

    /// Parses the plugin's arguments; unknown keys are errors, so that a host and a plugin of
    /// different builds are caught. A bare key means `key=on`.
    pub fn parse(raw: &[String]) -> Result<PluginConfig, String> {
        let mut cfg = PluginConfig::default();
        let mut metrics_on = false;
        let mut m = MetricsConfig::default();
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
                "syscalls" => cfg.syscalls = flag(k, v)?,
                "count_rep" => cfg.rep_iterations = choice(k, v, "instance", "iteration")?,
                "watch" => cfg.watch = whole(k, v)?,
                "markers" => cfg.markers = Some(PathBuf::from(v)),
                "record" => cfg.record = Some(PathBuf::from(v)),
                "trace" => cfg.trace = Some(PathBuf::from(v)),
                "checkpoint" => cfg.checkpoint = Some(PathBuf::from(v)),
                "slices" => cfg.slices = whole(k, v)?,
                "flow" => cfg.flow = whole(k, v)?,
                "turns" => cfg.turns = whole(k, v)?,
                "exclude" => {
                    cfg.exclude = (v.split(':'))
                        .filter(|x| !x.is_empty())
                        .map(String::from)
                        .collect()
                }
                "metrics" => metrics_on = flag(k, v)?,
                "metrics_thread" => m.own_thread = flag(k, v)?,
                "metrics_rows" => m.slice_rows = choice(k, v, "intervals", "slices")?,
                "metrics_calls" => m.calls_only = choice(k, v, "full", "empty")?,
                "l1d" => m.l1d = geometry(k, v)?,
                "l2" => m.l2 = geometry(k, v)?,
                _ => return Err(format!("unknown plugin argument {arg}")),
            }
        }
        if m.l1d.line != m.l2.line {
            return Err(format!(
                "plugin arguments l1d and l2: line sizes {} and {} differ",
                m.l1d.line, m.l2.line
            ));
        }
        if cfg.dir.as_os_str().is_empty() {
            return Err("plugin argument dir=DIR is required".into());
        }
        cfg.metrics = metrics_on.then_some(m);
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_field_goes_there_and_back() {
        let every = PluginConfig {
            dir: PathBuf::from("/tmp/d"),
            interval: 5,
            exact: true,
            count_only: true,
            tail: true,
            rep_iterations: true,
            watch: 7,
            markers: Some(PathBuf::from("/tmp/m")),
            record: Some(PathBuf::from("/tmp/r")),
            trace: Some(PathBuf::from("/tmp/t")),
            checkpoint: Some(PathBuf::from("/tmp/c")),
            syscalls: true,
            slices: 9,
            exclude: vec!["libgomp".into(), "libiomp5".into()],
            flow: 11,
            turns: 13,
            metrics: Some(MetricsConfig {
                l1d: CacheGeometry::parse("16K,4,64").unwrap(),
                l2: CacheGeometry::parse("2M,8,64").unwrap(),
                own_thread: false,
                calls_only: true,
                slice_rows: true,
            }),
        };
        assert_eq!(PluginConfig::parse(&every.to_args()).unwrap(), every);
        let plain = PluginConfig {
            dir: PathBuf::from("d"),
            ..PluginConfig::default()
        };
        assert_eq!(plain.to_args(), ["interval=100000000", "dir=d"]);
        assert_eq!(PluginConfig::parse(&plain.to_args()).unwrap(), plain);
        let metrics = PluginConfig {
            metrics: Some(MetricsConfig::default()),
            ..plain
        };
        assert_eq!(PluginConfig::parse(&metrics.to_args()).unwrap(), metrics);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let c = PluginConfig::parse(&args(&["dir=/tmp/x", "interval=5", "tail"])).unwrap();
        assert!(c.tail && c.interval == 5 && !c.exact);
        for bad in [
            &["dir=a", "count_rep=some"][..],
            &["dir=a", "watch=-1"],
            &["dir=a", "flow=fast"],
            &["dir=a", "turns=-5"],
            &["interval=5"],
            &["dir=a", "interval=0"],
            &["dir=a", "exact=maybe"],
            &["dir=a", "l1d=48K:12:64"],
            &["dir=a", "l2=1M:16:128"],
            &["dir=a", "colour=red"],
        ] {
            assert!(PluginConfig::parse(&args(bad)).is_err(), "{bad:?}");
        }
        let c = PluginConfig::parse(&args(&["dir=a", "metrics", "l1d=16K:4:64"])).unwrap();
        let m = c.metrics.unwrap();
        assert!(m.l1d.size == 16384 && m.l2 == CacheGeometry::L2 && m.own_thread);
    }
}
