//! What a job runs: its environment and bbv's command lines, one per step (`bbv run` or
//! `bbv gpu sample`, then with `simulate` `bbv trace` and `bbv simulate`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use crate::manifest::{Job, Kind, Simulate, Value, FIXED_PATH};

impl Job {
    /// The environment the job runs with: exactly `PATH` ([`FIXED_PATH`]), `HOME` (the
    /// user's), `LANG=C` and the job's `env`, which may override them; nothing else, wherever
    /// it runs.
    pub fn environment(&self, home: &str) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            ("PATH".to_string(), FIXED_PATH.to_string()),
            ("HOME".to_string(), home.to_string()),
            ("LANG".to_string(), "C".to_string()),
        ]);
        env.extend(self.env.clone());
        env
    }

    /// bbv's arguments for the job's first step, writing into `out`.
    pub fn bbv_args(&self, out: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = match &self.kind {
            Kind::Cpu { .. } => vec!["run".into()],
            Kind::Gpu { traces } => vec!["gpu".into(), "sample".into(), traces.into()],
        };
        for (key, value) in &self.options {
            match value {
                Value::Flag(true) => args.push(format!("--{key}").into()),
                Value::Flag(false) if key == "model-thread" => {
                    args.extend([format!("--{key}").into(), "no".into()])
                }
                Value::Flag(false) => {}
                Value::One(v) => args.extend([format!("--{key}").into(), v.into()]),
                Value::Many(vs) => {
                    for v in vs {
                        args.extend([format!("--{key}").into(), v.into()]);
                    }
                }
            }
        }
        // A simulated job's estimate gets its error band from the run's per-interval metrics.
        if self.banded() && !self.options.contains_key("validate") {
            args.push("--validate".into());
        }
        args.extend(["-o".into(), out.into()]);
        if let Kind::Cpu { command, .. } = &self.kind {
            args.push("--".into());
            args.extend(command.iter().map(OsString::from));
        }
        args
    }

    /// Whether the job's estimate can have an error band: a simulated CPU job whose regions
    /// are intervals (LoopPoint slices have none).
    fn banded(&self) -> bool {
        let slices = matches!(self.options.get("regions"), Some(Value::One(v)) if v == "looppoint");
        matches!(self.kind, Kind::Cpu { .. }) && self.simulate != Simulate::No && !slices
    }

    /// bbv's arguments for every step of the job, in order, writing into `out`: the run,
    /// then with `simulate` the trace of its regions and their simulation (under the same
    /// QEMU, plugin and CPU model as the run).
    pub fn steps(&self, out: &Path) -> Vec<Vec<OsString>> {
        let mut steps = vec![self.bbv_args(out)];
        let Kind::Cpu { command, .. } = &self.kind else {
            return steps;
        };
        if self.simulate == Simulate::No {
            return steps;
        }
        let mut launch: Vec<OsString> = Vec::new();
        for key in ["qemu", "plugin", "cpu"] {
            if let Some(Value::One(v)) = self.options.get(key) {
                launch.extend([format!("--{key}").into(), v.into()]);
            }
        }
        let guest = command.iter().map(OsString::from);
        let mut trace: Vec<OsString> = vec!["trace".into(), out.into()];
        trace.extend(launch.iter().cloned());
        trace.push("--".into());
        trace.extend(guest.clone());
        let mut simulate: Vec<OsString> = vec!["simulate".into(), out.into()];
        simulate.extend(launch);
        if self.simulate == Simulate::Full {
            simulate.extend(["--full".into(), "--".into()]);
            simulate.extend(guest);
        } else if !self.banded() {
            // LoopPoint slices have no band: the manifest asked for the estimate regardless.
            simulate.push("--no-band".into());
        }
        steps.extend([trace, simulate]);
        steps
    }
}
