//! The suite manifest (TOML): `[defaults]` and one `[[job]]` per workload.
//!
//! Everything is checked before any job runs: unknown keys, values of the wrong type, bad or
//! duplicate names, a program that cannot be found, a missing trace list. Errors name the
//! manifest's line (of the offending key, or of the job's `[[job]]` header).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::SuiteError;

/// The PATH every job runs with unless its `env` sets one.
pub const FIXED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What a job runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `bbv run` on a CPU program.
    Cpu {
        /// The program and its arguments.
        command: Vec<String>,
        /// The program's resolved path (for its build id).
        program: PathBuf,
    },
    /// `bbv gpu sample` on an Accel-Sim trace.
    Gpu {
        /// The trace's `kernelslist.g`.
        traces: PathBuf,
    },
}

/// An option value, as `bbv run` or `bbv gpu sample` takes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A flag (`validate = true`).
    Flag(bool),
    /// One value.
    One(String),
    /// A repeated option (`exclude-image = ["libgomp", "libfoo"]`).
    Many(Vec<String>),
}

/// One workload, with the defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// `[A-Za-z0-9._-]+`, unique in the manifest: its folder under OUT.
    pub name: String,
    /// The line of its `[[job]]` header.
    pub line: usize,
    /// What it runs.
    pub kind: Kind,
    /// Where it runs (default: the manifest's folder).
    pub cwd: PathBuf,
    /// A file for its standard input (default: /dev/null).
    pub stdin: Option<PathBuf>,
    /// Its environment beyond the fixed set ([`Job::environment`]).
    pub env: BTreeMap<String, String>,
    /// Killed (SIGTERM, SIGKILL 10 s later) after this long.
    pub timeout: Option<Duration>,
    /// Options of `bbv run` / `bbv gpu sample`, by long name.
    pub options: BTreeMap<String, Value>,
    /// Whether the run's regions are then traced and simulated with ChampSim.
    pub simulate: Simulate,
}

/// A CPU job's `simulate` key: after `bbv run`, `bbv trace` and `bbv simulate` (`true`), with
/// the whole run simulated too (`"full"`: `bbv simulate --full`, as long as ChampSim on the
/// whole program).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Simulate {
    /// Not simulated (`false`, the default).
    #[default]
    No,
    /// The regions only.
    Regions,
    /// The regions and the whole run.
    Full,
}

/// A parsed manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// Its path.
    pub path: PathBuf,
    /// The jobs, in manifest order.
    pub jobs: Vec<Job>,
}

/// Option value types.
#[derive(Clone, Copy, PartialEq)]
enum Ty {
    Int,
    Float,
    Bool,
    Str,
    List,
}

/// `bbv run`'s options a CPU job may set (the values are checked by `bbv run`'s own parser
/// before anything runs).
const CPU_OPTIONS: [(&str, Ty); 20] = [
    ("interval", Ty::Int),
    ("max-k", Ty::Int),
    ("validate", Ty::Bool),
    ("target-error", Ty::Float),
    ("pick", Ty::Str),
    ("threads", Ty::Str),
    ("warmup", Ty::Int),
    ("regions", Ty::Str),
    ("exclude-image", Ty::List),
    ("flow-quantum", Ty::Int),
    ("schedule", Ty::Str),
    ("exact", Ty::Bool),
    ("tail", Ty::Bool),
    ("count-rep", Ty::Str),
    ("l1d", Ty::Str),
    ("l2", Ty::Str),
    ("model-thread", Ty::Bool),
    ("qemu", Ty::Str),
    ("plugin", Ty::Str),
    ("cpu", Ty::Str),
];

/// `bbv gpu sample`'s options a GPU job may set.
const GPU_OPTIONS: [(&str, Ty); 3] = [
    ("max-k", Ty::Int),
    ("method", Ty::Str),
    ("spread", Ty::Float),
];

/// Keys of a job that are not options.
const JOB_KEYS: [&str; 9] = [
    "name", "kind", "command", "traces", "cwd", "stdin", "env", "timeout", "simulate",
];

/// The largest manifest read: thousands of jobs fit.
pub const MANIFEST_BYTES: u64 = 16 << 20;

/// Reads and checks a manifest.
pub fn load(path: &Path) -> Result<Manifest, SuiteError> {
    let text = bbv_files::input::read_text(path, MANIFEST_BYTES)?;
    parse(path, &text)
}

/// Parses manifest `text` (read from `path`, whose folder is the default working directory).
pub fn parse(path: &Path, text: &str) -> Result<Manifest, SuiteError> {
    let at = Lines { path, text };
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |s| at.line_of(s.start));
        SuiteError::Manifest {
            path: path.to_path_buf(),
            line,
            what: e.message().trim().to_string(),
        }
    })?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::path::absolute(base).map_err(|e| SuiteError::io(path, e))?;
    for key in doc.keys() {
        if key != "defaults" && key != "job" {
            return Err(at.error(
                at.key_line(0, key),
                format!("unknown key {key:?} (expected [defaults] or [[job]])"),
            ));
        }
    }
    let empty = toml::Table::new();
    let defaults = match doc.get("defaults") {
        None => &empty,
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(at.error(
                at.key_line(0, "defaults"),
                "defaults must be a table".into(),
            ))
        }
    };
    let headers = at.job_headers();
    let jobs = match doc.get("job") {
        None => return Err(at.error(1, "no [[job]] in the manifest".into())),
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            return Err(at.error(
                at.key_line(0, "job"),
                "job must be an array of tables ([[job]])".into(),
            ))
        }
    };
    let defaults_line = at.header_line("[defaults]");
    for key in defaults.keys() {
        if key == "name" || key == "command" || key == "traces" {
            return Err(at.error(
                at.key_line(defaults_line, key),
                format!("{key} belongs in a [[job]], not in [defaults]"),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let header = headers.get(i).copied().unwrap_or(0);
        let toml::Value::Table(job) = job else {
            return Err(at.error(header, "each job must be a table".into()));
        };
        let job = JobParser {
            at: &at,
            header,
            defaults,
            defaults_line,
            job,
            base: &base,
        }
        .parse()?;
        if !seen.insert(job.name.clone()) {
            return Err(at.error(
                at.key_line(header, "name"),
                format!("job name {:?} is used twice", job.name),
            ));
        }
        out.push(job);
    }
    Ok(Manifest {
        path: path.to_path_buf(),
        jobs: out,
    })
}

/// Line numbers in the manifest's text.
struct Lines<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Lines<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn error(&self, line: usize, what: String) -> SuiteError {
        SuiteError::Manifest {
            path: self.path.to_path_buf(),
            line,
            what,
        }
    }

    /// Lines of the `[[job]]` headers, in order.
    fn job_headers(&self) -> Vec<usize> {
        self.text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with("[[job]]"))
            .map(|(i, _)| i + 1)
            .collect()
    }

    fn header_line(&self, header: &str) -> usize {
        self.text
            .lines()
            .position(|l| l.trim_start().starts_with(header))
            .map_or(0, |i| i + 1)
    }

    /// The line of `key = ...` in the table whose header is on line `from` (0: the top
    /// level), or `from` when not found.
    fn key_line(&self, from: usize, key: &str) -> usize {
        for (i, l) in self.text.lines().enumerate().skip(from) {
            let t = l.trim_start();
            if from > 0 && t.starts_with('[') {
                break;
            }
            let k = t.split('=').next().unwrap_or("").trim().trim_matches('"');
            if t.contains('=') && k == key {
                return i + 1;
            }
        }
        from.max(1)
    }
}

struct JobParser<'a> {
    at: &'a Lines<'a>,
    header: usize,
    defaults: &'a toml::Table,
    defaults_line: usize,
    job: &'a toml::Table,
    base: &'a Path,
}

impl JobParser<'_> {
    /// A key's value in the job, else in the defaults, with its line.
    fn get(&self, key: &str) -> Option<(&toml::Value, usize)> {
        match self.job.get(key) {
            Some(v) => Some((v, self.at.key_line(self.header, key))),
            None => self
                .defaults
                .get(key)
                .map(|v| (v, self.at.key_line(self.defaults_line, key))),
        }
    }

    fn err(&self, line: usize, what: String) -> SuiteError {
        self.at.error(line, what)
    }

    fn string(&self, key: &str) -> Result<Option<(String, usize)>, SuiteError> {
        match self.get(key) {
            None => Ok(None),
            Some((toml::Value::String(s), line)) => Ok(Some((s.clone(), line))),
            Some((_, line)) => Err(self.err(line, format!("{key} must be a string"))),
        }
    }

    fn path(&self, key: &str, cwd: &Path) -> Result<Option<(PathBuf, usize)>, SuiteError> {
        Ok(self.string(key)?.map(|(s, line)| (cwd.join(s), line)))
    }

    fn parse(&self) -> Result<Job, SuiteError> {
        let (name, name_line) = self
            .string("name")?
            .ok_or_else(|| self.err(self.header, "a job needs a name".into()))?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            || name == "."
            || name == ".."
        {
            return Err(self.err(
                name_line,
                format!("job name {name:?}: use letters, digits, '.', '_' and '-' only"),
            ));
        }
        let gpu = match self.string("kind")? {
            None => false,
            Some((k, _)) if k == "cpu" => false,
            Some((k, _)) if k == "gpu" => true,
            Some((k, line)) => {
                return Err(self.err(line, format!("kind {k:?}: expected \"cpu\" or \"gpu\"")))
            }
        };
        let cwd = match self.path("cwd", self.base)? {
            None => self.base.to_path_buf(),
            Some((p, _)) if p.is_dir() => p,
            Some((p, line)) => {
                return Err(self.err(line, format!("cwd {}: no such folder", p.display())))
            }
        };
        let stdin = match self.path("stdin", &cwd)? {
            None => None,
            Some((p, _)) if p.is_file() => Some(p),
            Some((p, line)) => {
                return Err(self.err(line, format!("stdin {}: no such file", p.display())))
            }
        };
        let env = self.env()?;
        let timeout = self.timeout()?;
        let kind = if gpu {
            if self.job.contains_key("command") {
                let line = self.at.key_line(self.header, "command");
                return Err(self.err(line, "a gpu job takes traces, not a command".into()));
            }
            let (traces, line) = self.path("traces", &cwd)?.ok_or_else(|| {
                self.err(
                    self.header,
                    format!("gpu job {name:?} needs traces = \".../kernelslist.g\""),
                )
            })?;
            if !traces.is_file() {
                return Err(self.err(line, format!("traces {}: no such file", traces.display())));
            }
            Kind::Gpu { traces }
        } else {
            if self.job.contains_key("traces") {
                let line = self.at.key_line(self.header, "traces");
                return Err(self.err(line, "traces is for kind = \"gpu\" jobs".into()));
            }
            let (command, line) = self.command(&name)?;
            let search = env.get("PATH").map_or(FIXED_PATH, String::as_str);
            let program = find_program(&command[0], &cwd, search).ok_or_else(|| {
                self.err(
                    line,
                    format!(
                        "program {:?} not found (in {} or on PATH {search})",
                        command[0],
                        cwd.display()
                    ),
                )
            })?;
            Kind::Cpu { command, program }
        };
        let options = self.options(gpu)?;
        let simulate = self.simulate(gpu)?;
        Ok(Job {
            name,
            line: self.header,
            kind,
            cwd,
            stdin,
            env,
            timeout,
            options,
            simulate,
        })
    }

    fn simulate(&self, gpu: bool) -> Result<Simulate, SuiteError> {
        let Some((v, line)) = self.get("simulate") else {
            return Ok(Simulate::No);
        };
        let s = match v {
            toml::Value::Boolean(false) => Simulate::No,
            toml::Value::Boolean(true) => Simulate::Regions,
            toml::Value::String(s) if s == "full" => Simulate::Full,
            _ => {
                return Err(self.err(
                    line,
                    "simulate: expected true, false or \"full\" (the whole run too)".into(),
                ))
            }
        };
        if gpu && s != Simulate::No && self.job.contains_key("simulate") {
            return Err(self.err(line, "simulate is for CPU jobs (ChampSim)".into()));
        }
        Ok(if gpu { Simulate::No } else { s })
    }

    fn command(&self, name: &str) -> Result<(Vec<String>, usize), SuiteError> {
        let line = self.at.key_line(self.header, "command");
        let Some(v) = self.job.get("command") else {
            return Err(self.err(
                self.header,
                format!("job {name:?} needs a command (a list: [\"prog\", \"arg\", ...])"),
            ));
        };
        let toml::Value::Array(a) = v else {
            return Err(self.err(line, "command must be a list of strings".into()));
        };
        let words: Option<Vec<String>> = a.iter().map(|w| w.as_str().map(str::to_string)).collect();
        match words {
            Some(w) if !w.is_empty() && !w[0].is_empty() => Ok((w, line)),
            _ => Err(self.err(line, "command must be a non-empty list of strings".into())),
        }
    }

    fn env(&self) -> Result<BTreeMap<String, String>, SuiteError> {
        let mut env = BTreeMap::new();
        for (table, line) in [
            (
                self.defaults.get("env"),
                self.at.key_line(self.defaults_line, "env"),
            ),
            (self.job.get("env"), self.at.key_line(self.header, "env")),
        ] {
            let Some(t) = table else { continue };
            let toml::Value::Table(t) = t else {
                return Err(self.err(line, "env must be a table of strings".into()));
            };
            for (k, v) in t {
                let Some(v) = v.as_str() else {
                    return Err(self.err(line, format!("env {k}: the value must be a string")));
                };
                if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                    return Err(self.err(line, format!("env {k:?}: not a variable name")));
                }
                env.insert(k.clone(), v.to_string());
            }
        }
        Ok(env)
    }

    fn timeout(&self) -> Result<Option<Duration>, SuiteError> {
        let Some((v, line)) = self.get("timeout") else {
            return Ok(None);
        };
        let secs = match v {
            toml::Value::Integer(n) if *n > 0 => Some(*n as u64),
            toml::Value::String(s) => parse_duration(s),
            _ => None,
        };
        secs.map(|s| Some(Duration::from_secs(s))).ok_or_else(|| {
            self.err(
                line,
                "timeout: expected seconds (a positive integer) or \"90s\", \"30m\", \"2h\"".into(),
            )
        })
    }

    fn options(&self, gpu: bool) -> Result<BTreeMap<String, Value>, SuiteError> {
        let table: &[(&str, Ty)] = if gpu { &GPU_OPTIONS } else { &CPU_OPTIONS };
        let mut options = BTreeMap::new();
        for (source, start) in [(self.defaults, self.defaults_line), (self.job, self.header)] {
            for (key, value) in source {
                if JOB_KEYS.contains(&key.as_str()) {
                    continue;
                }
                let line = self.at.key_line(start, key);
                let Some(&(_, ty)) = table.iter().find(|(k, _)| k == key) else {
                    let known: Vec<&str> = table.iter().map(|(k, _)| *k).collect();
                    // A CPU option in [defaults] does not apply to GPU jobs, and vice versa.
                    let other: &[(&str, Ty)] = if gpu { &CPU_OPTIONS } else { &GPU_OPTIONS };
                    if start == self.defaults_line && other.iter().any(|(k, _)| k == key) {
                        continue;
                    }
                    return Err(self.err(
                        line,
                        format!(
                            "unknown key {key:?} (a job takes {}, and these {} options: {})",
                            JOB_KEYS.join(", "),
                            if gpu { "bbv gpu sample" } else { "bbv run" },
                            known.join(", ")
                        ),
                    ));
                };
                options.insert(key.clone(), self.value(key, value, ty, line)?);
            }
        }
        Ok(options)
    }

    fn value(&self, key: &str, v: &toml::Value, ty: Ty, line: usize) -> Result<Value, SuiteError> {
        let bad = |want: &str| self.err(line, format!("{key} must be {want}"));
        Ok(match (ty, v) {
            (Ty::Int, toml::Value::Integer(n)) if *n >= 0 => Value::One(n.to_string()),
            (Ty::Int, _) => return Err(bad("a non-negative integer")),
            (Ty::Float, toml::Value::Float(f)) => Value::One(f.to_string()),
            (Ty::Float, toml::Value::Integer(n)) => Value::One(n.to_string()),
            (Ty::Float, _) => return Err(bad("a number")),
            (Ty::Bool, toml::Value::Boolean(b)) => Value::Flag(*b),
            (Ty::Bool, _) => return Err(bad("true or false")),
            (Ty::Str, toml::Value::String(s)) => Value::One(s.clone()),
            (Ty::Str, _) => return Err(bad("a string")),
            (Ty::List, toml::Value::Array(a)) => Value::Many(
                a.iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("a list of strings"))?,
            ),
            (Ty::List, toml::Value::String(s)) => Value::Many(vec![s.clone()]),
            (Ty::List, _) => return Err(bad("a list of strings")),
        })
    }
}

/// `90`, `90s`, `30m`, `2h` in seconds.
fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 = num.parse().ok().filter(|&n| n > 0)?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// A program as a job runs it: a path (relative to `cwd`) when it has a slash, else looked up
/// on `path`.
fn find_program(name: &str, cwd: &Path, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = cwd.join(name);
        return runnable(&p).then_some(p);
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| cwd.join(d).join(name))
        .find(|p| runnable(p))
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
