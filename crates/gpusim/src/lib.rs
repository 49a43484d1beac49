//! Running Accel-Sim's trace-driven GPU simulator (`accel-sim.out`): finding what
//! `scripts/accelsim` builds, choosing a tested configuration by the traces' SM version, and
//! one simulation of a kernel list, read back per launch ([`Simulated`]).
//!
//! Accel-Sim prints, when each launch finishes, `kernel_name`, `kernel_launch_uid`,
//! `gpu_sim_cycle` (that launch's cycles), `gpu_sim_insn` (its thread instructions) and the
//! running totals `gpu_tot_sim_cycle`/`gpu_tot_sim_insn`; a run that got to its end prints
//! `GPGPU-Sim: *** exit detected ***`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What went wrong finding or running Accel-Sim.
#[derive(Debug, thiserror::Error)]
pub enum GpuSimError {
    /// No Accel-Sim where it was looked for.
    #[error("Accel-Sim not found ({0}): build it with scripts/accelsim, or name its folder or accel-sim.out with --accelsim PATH")]
    Missing(String),
    /// No configuration fits, or the one named does not.
    #[error("{0}")]
    Config(String),
    /// It could not be started, or a file for it could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It failed, or its output lacks the figures.
    #[error("Accel-Sim on {}: {why}", list.display())]
    Failed {
        /// The kernel list.
        list: PathBuf,
        /// Its exit status or what is missing, and the end of its output.
        why: String,
    },
}

/// An Accel-Sim build: the simulator, gpgpu-sim's CUDA runtime it loads, its configurations.
#[derive(Clone, Debug)]
pub struct Simulator {
    /// `accel-sim.out`.
    pub exe: PathBuf,
    /// The folder holding gpgpu-sim's `libcudart.so` (put on `LD_LIBRARY_PATH`).
    pub lib: PathBuf,
    /// One folder per tested configuration.
    pub configs: PathBuf,
}

/// A tested configuration: `gpgpusim.config`, the files it names and `trace.config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Its name (`SM7_QV100`, ...).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The SM version it models (`-gpgpu_ptx_force_max_capability`).
    pub sm: u32,
}

impl Simulator {
    /// The build in `explicit` (its folder, or `bin/accel-sim.out` in it), else in
    /// `$BBV_ACCELSIM_CACHE`, `$XDG_CACHE_HOME/bbvkit/accelsim` or `~/.cache/bbvkit/accelsim`.
    pub fn find(explicit: Option<&Path>) -> Result<Simulator, GpuSimError> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = match explicit {
            Some(p) if p.is_file() => p
                .parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            Some(p) => p.to_path_buf(),
            None => env("BBV_ACCELSIM_CACHE")
                .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("bbvkit/accelsim")))
                .or_else(|| env("HOME").map(|h| h.join(".cache/bbvkit/accelsim")))
                .ok_or_else(|| GpuSimError::Missing("no HOME to look in".into()))?,
        };
        // Accel-Sim runs in a folder of its own: a relative name would not find it there.
        let root = std::path::absolute(&root).unwrap_or(root);
        let explicit = explicit.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
        let explicit = explicit.as_deref();
        let s = Simulator {
            exe: match explicit {
                Some(p) if p.is_file() => p.to_path_buf(),
                _ => root.join("bin/accel-sim.out"),
            },
            lib: root.join("lib"),
            configs: root.join("configs"),
        };
        for (path, what) in [
            (&s.exe, "the simulator"),
            (&s.lib, "gpgpu-sim's libcudart.so folder"),
            (&s.configs, "the configurations"),
        ] {
            if !path.exists() {
                return Err(GpuSimError::Missing(format!(
                    "{what}, {}, does not exist",
                    path.display()
                )));
            }
        }
        Ok(s)
    }

    /// Every configuration with a `gpgpusim.config` and a `trace.config`, by name.
    pub fn configs(&self) -> Result<Vec<Config>, GpuSimError> {
        let io = |source| GpuSimError::Io {
            what: format!("cannot list {}", self.configs.display()),
            source,
        };
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.configs).map_err(io)? {
            let dir = e.map_err(io)?.path();
            let main = dir.join("gpgpusim.config");
            if !main.is_file() || !dir.join("trace.config").is_file() {
                continue;
            }
            let text =
                bbv_files::input::read_text(&main, 1 << 20).map_err(|e| GpuSimError::Io {
                    what: format!("cannot read {}", main.display()),
                    source: std::io::Error::other(e.to_string()),
                })?;
            let sm = text.lines().find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("-gpgpu_ptx_force_max_capability"))
                    .then(|| w.next()?.parse().ok())?
            });
            if let Some(sm) = sm {
                let name = dir.file_name().unwrap_or_default().to_string_lossy().into();
                out.push(Config { name, dir, sm });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The configuration `name`, which must model SM version `sm`; without a name, the first
    /// by name that does.
    pub fn config(&self, sm: u32, name: Option<&str>) -> Result<Config, GpuSimError> {
        let all = self.configs()?;
        let list = || match all.is_empty() {
            true => format!("none in {}", self.configs.display()),
            false => all
                .iter()
                .map(|c| format!("{} (sm_{})", c.name, c.sm))
                .collect::<Vec<_>>()
                .join(", "),
        };
        match name {
            Some(n) => {
                let c = all.iter().find(|c| c.name == n).ok_or_else(|| {
                    GpuSimError::Config(format!("no configuration {n}; there are {}", list()))
                })?;
                if c.sm != sm {
                    return Err(GpuSimError::Config(format!(
                        "configuration {n} models sm_{}, the traces are sm_{sm}: their timing would not describe this GPU; choose one of {}",
                        c.sm,
                        list()
                    )));
                }
                Ok(c.clone())
            }
            None => all.iter().find(|c| c.sm == sm).cloned().ok_or_else(|| {
                GpuSimError::Config(format!(
                    "no tested configuration models sm_{sm} (the traces' binary version); there are {}",
                    list()
                ))
            }),
        }
    }
}

/// One launch as Accel-Sim reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Its kernel's name.
    pub kernel: String,
    /// 1-based, in the list's launch order.
    pub uid: u64,
    /// Cycles from its start to its end (`gpu_sim_cycle`).
    pub cycles: u64,
    /// Thread instructions (`gpu_sim_insn`).
    pub instructions: u64,
}

/// One simulation of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    /// Per launch, in the order they finished.
    pub launches: Vec<Launch>,
    /// The run's cycles (`gpu_tot_sim_cycle` at the end).
    pub total_cycles: u64,
    /// The run's thread instructions.
    pub total_instructions: u64,
    /// Wall seconds.
    pub seconds: f64,
}

/// The most Accel-Sim's output may hold: gpgpu-sim prints some 20 KB of statistics per launch,
/// so this is a million launches and more; past it, the program is not Accel-Sim.
const MAX_OUTPUT: u64 = 16 << 30;

/// The keys [`parse`] reads.
const KEYS: [&str; 6] = [
    "kernel_name",
    "kernel_launch_uid",
    "gpu_sim_cycle",
    "gpu_sim_insn",
    "gpu_tot_sim_cycle",
    "gpu_tot_sim_insn",
];

/// Whether [`parse`] needs `line` of Accel-Sim's output.
fn read_line(line: &str) -> bool {
    match line.split_once(" = ") {
        Some((key, _)) => KEYS.contains(&key.trim()),
        None => line.starts_with("GPGPU-Sim: *** exit detected ***"),
    }
}

/// Reads Accel-Sim's standard output (`list` names it in errors).
pub fn parse(text: &str, list: &Path) -> Result<Simulated, GpuSimError> {
    let fail = |why: String| GpuSimError::Failed {
        list: list.to_path_buf(),
        why,
    };
    let mut launches = Vec::new();
    let mut kernel: Option<String> = None;
    let mut uid: Option<u64> = None;
    let mut cycles: Option<u64> = None;
    let (mut total_cycles, mut total_instructions) = (0, 0);
    let mut ended = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(" = ") else {
            ended |= line.starts_with("GPGPU-Sim: *** exit detected ***");
            continue;
        };
        let value = value.trim();
        let number = || {
            value.parse::<u64>().map_err(|_| {
                fail(format!(
                    "{} = '{}' is not a whole number (after {} launches)",
                    key.trim(),
                    bbv_files::input::quote(value.as_bytes()),
                    launches.len()
                ))
            })
        };
        match key.trim() {
            "kernel_name" => kernel = Some(value.to_string()),
            "kernel_launch_uid" => uid = Some(number()?),
            "gpu_sim_cycle" => cycles = Some(number()?),
            "gpu_sim_insn" => {
                let (Some(k), Some(u), Some(c)) = (kernel.take(), uid.take(), cycles.take()) else {
                    return Err(fail(format!(
                        "gpu_sim_insn without the kernel_name, kernel_launch_uid and gpu_sim_cycle lines before it (after {} launches)",
                        launches.len()
                    )));
                };
                launches.push(Launch {
                    kernel: k,
                    uid: u,
                    cycles: c,
                    instructions: number()?,
                });
            }
            "gpu_tot_sim_cycle" => total_cycles = number()?,
            "gpu_tot_sim_insn" => total_instructions = number()?,
            _ => {}
        }
    }
    if !ended {
        return Err(fail(
            "its output does not end with 'exit detected': the run did not finish".into(),
        ));
    }
    // Figures no simulation of these launches can give: every later number (IPC, the
    // estimate, its error) would be silently wrong.
    if launches.is_empty() {
        return Err(fail("it reported no launch".into()));
    }
    if let Some(l) = launches
        .iter()
        .find(|l| l.cycles == 0 || l.instructions == 0)
    {
        return Err(fail(format!(
            "launch {} ({}) took {} cycles for {} instructions",
            l.uid, l.kernel, l.cycles, l.instructions
        )));
    }
    let sum: u64 = launches.iter().map(|l| l.instructions).sum();
    if sum != total_instructions {
        return Err(fail(format!(
            "its launches' instructions add up to {sum}, its total (gpu_tot_sim_insn) is {total_instructions}"
        )));
    }
    Ok(Simulated {
        launches,
        total_cycles,
        total_instructions,
        seconds: 0.0,
    })
}

impl Simulator {
    /// Simulates the launches of `list` with `config`, in a temporary folder holding the
    /// configuration's files (gpgpu-sim names some by relative path).
    pub fn run(&self, config: &Config, list: &Path) -> Result<Simulated, GpuSimError> {
        let io = |what: String| move |source| GpuSimError::Io { what, source };
        let work = tempfile::Builder::new()
            .prefix(&bbv_files::interrupt::tagged("accelsim"))
            .tempdir()
            .map_err(io("cannot make a temporary folder".into()))?;
        for e in std::fs::read_dir(&config.dir).map_err(io(format!(
            "cannot read the configuration {}",
            config.dir.display()
        )))? {
            let from = e.map_err(io("cannot list a configuration".into()))?.path();
            if from.is_file() {
                let to = work.path().join(from.file_name().unwrap_or_default());
                std::fs::copy(&from, &to).map_err(io(format!("cannot copy {}", from.display())))?;
            }
        }
        let list_abs = std::path::absolute(list).unwrap_or_else(|_| list.to_path_buf());
        let mut cmd = Command::new(&self.exe);
        cmd.arg("-trace")
            .arg(&list_abs)
            .args(["-config", "./gpgpusim.config", "-config", "./trace.config"])
            .current_dir(work.path())
            .env("LD_LIBRARY_PATH", &self.lib)
            .stdin(Stdio::null());
        bbv_files::interrupt::dies_with_bbv(&mut cmd);
        let start = Instant::now();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("cannot start {}", self.exe.display())))?;
        // gpgpu-sim prints pages of statistics per launch: only the lines parse reads are kept,
        // and the last few for a message.
        let mut last: std::collections::VecDeque<String> = Default::default();
        let out = bbv_files::child::read_bounded(&mut child, MAX_OUTPUT, 1 << 20, &mut |l| {
            if !l.trim().is_empty() {
                if last.len() == 3 {
                    last.pop_front();
                }
                last.push_back(bbv_files::input::quote(l.trim_end().as_bytes()));
            }
            read_line(l)
        });
        if out.overflowed {
            let _ = child.kill();
        }
        let status = child
            .wait()
            .map_err(io(format!("cannot wait for {}", self.exe.display())))?;
        let seconds = start.elapsed().as_secs_f64();
        let tail = || {
            let mut lines: Vec<String> = last.iter().cloned().collect();
            lines.extend(
                out.stderr
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| bbv_files::input::quote(l.as_bytes())),
            );
            lines[lines.len().saturating_sub(3)..].join(" | ")
        };
        if out.overflowed {
            return Err(GpuSimError::Failed {
                list: list.to_path_buf(),
                why: format!(
                    "{} printed more than {} GiB or a line over a megabyte, not an Accel-Sim run ({})",
                    self.exe.display(),
                    MAX_OUTPUT >> 30,
                    tail()
                ),
            });
        }
        if !status.success() {
            return Err(GpuSimError::Failed {
                list: list.to_path_buf(),
                why: format!("{status}: {}", tail()),
            });
        }
        let mut s = parse(&out.stdout, list).map_err(|e| match e {
            GpuSimError::Failed { list, why } => GpuSimError::Failed {
                list,
                why: format!("{why} ({})", tail()),
            },
            other => other,
        })?;
        s.seconds = seconds;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "launching kernel name: a uid: 1\n\
        kernel_name = _Z1av \nkernel_launch_uid = 1 \ngpu_sim_cycle = 7506\ngpu_sim_insn = 139264\n\
        gpu_ipc =      18.5537\ngpu_tot_sim_cycle = 7506\ngpu_tot_sim_insn = 139264\n\
        kernel_name = _Z1bv \nkernel_launch_uid = 2 \ngpu_sim_cycle = 5400\ngpu_sim_insn = 3200\n\
        gpu_tot_sim_cycle = 12906\ngpu_tot_sim_insn = 142464\n\
        GPGPU-Sim: *** simulation thread exiting ***\nGPGPU-Sim: *** exit detected ***\n";

    /// Output no simulation of the list can give is refused, saying what is wrong.
    #[test]
    fn impossible_figures_are_refused() {
        for (text, why) in [
            (
                TWO.replace("gpu_sim_cycle = 5400", "gpu_sim_cycle = 0"),
                "took 0 cycles",
            ),
            (
                TWO.replace("gpu_sim_insn = 3200", "gpu_sim_insn = 0"),
                "for 0 instructions",
            ),
            (
                TWO.replace("gpu_tot_sim_insn = 142464", "gpu_tot_sim_insn = 142465"),
                "add up to 142464",
            ),
            (
                "GPGPU-Sim: *** exit detected ***\n".to_string(),
                "no launch",
            ),
        ] {
            let e = parse(&text, Path::new("l")).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn launches_and_totals_are_read() {
        let s = parse(TWO, Path::new("l")).unwrap();
        assert_eq!(
            s.launches,
            [
                Launch {
                    kernel: "_Z1av".into(),
                    uid: 1,
                    cycles: 7506,
                    instructions: 139264
                },
                Launch {
                    kernel: "_Z1bv".into(),
                    uid: 2,
                    cycles: 5400,
                    instructions: 3200
                }
            ]
        );
        assert_eq!((s.total_cycles, s.total_instructions), (12906, 142464));
    }

    #[test]
    fn an_unfinished_or_garbled_run_is_an_error() {
        let cut = &TWO[..TWO.find("GPGPU-Sim: ***").unwrap()];
        assert!(parse(cut, Path::new("l"))
            .unwrap_err()
            .to_string()
            .contains("did not finish"));
        let bad = TWO.replace("gpu_sim_cycle = 5400", "gpu_sim_cycle = x");
        assert!(parse(&bad, Path::new("l"))
            .unwrap_err()
            .to_string()
            .contains("not a whole number"));
        let orphan = TWO.replace("kernel_launch_uid = 2 \n", "");
        assert!(parse(&orphan, Path::new("l")).is_err());
    }

    #[test]
    fn a_missing_build_names_the_script() {
        let e = Simulator::find(Some(Path::new("/nonexistent/accelsim"))).unwrap_err();
        assert!(e.to_string().contains("scripts/accelsim"), "{e}");
    }
}
