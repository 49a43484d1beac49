//! Which plugin a QEMU can load, from the `qemu_plugin_*` symbols its executable exports.
//!
//! QEMU loads a plugin with `RTLD_NOW` and refuses one whose API version is outside its range:
//! a v1 plugin loads in QEMU 6.0-8.2 only, a v3 plugin in 9.1 and later, and QEMU 9.0 (v2)
//! takes neither. A static QEMU exports nothing and has no `-plugin` option at all. The
//! symbols tell these apart without parsing version strings: the scoreboard API came with v2
//! (9.0), conditional callbacks with v3 (9.1).

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

use crate::CollectError;

/// The plugin API levels bbv builds a plugin for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginApi {
    /// QEMU 6.0-8.2: `libbbv_qemu.so`.
    V1,
    /// QEMU 9.1 and later (API v3, v4, v5): `libbbv_qemu_v3.so`.
    V3,
}

impl PluginApi {
    /// The plugin library's file name.
    pub fn library(self) -> &'static str {
        match self {
            PluginApi::V1 => "libbbv_qemu.so",
            PluginApi::V3 => "libbbv_qemu_v3.so",
        }
    }
}

/// What `qemu` exports for plugins.
pub fn plugin_api(qemu: &Path) -> Result<PluginApi, CollectError> {
    // Only the dynamic symbol table is read (QEMU is 15-20 MB; reading it whole cost about
    // 16 ms of every run).
    let handle = std::fs::File::open(qemu).map_err(|e| CollectError::io(qemu, e))?;
    let data = object::ReadCache::new(handle);
    let file = object::File::parse(&data).map_err(|e| CollectError::Unsupported {
        what: format!("{}: not an executable QEMU ({e})", qemu.display()),
    })?;
    let exported: Vec<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok())
        .filter(|n| n.starts_with("qemu_plugin_"))
        .map(String::from)
        .collect();
    let has = |name: &str| exported.iter().any(|n| n == name);
    let version = crate::qemu_version(qemu).unwrap_or_else(|| "unknown version".into());
    if !has("qemu_plugin_register_vcpu_tb_trans_cb") {
        return Err(CollectError::Unsupported {
            what: format!(
                "{} ({version}) was built without TCG plugin support (a static build, as Debian's own QEMU 10 packages are: it has no -plugin option); use a QEMU built with --enable-plugins: bbvkit's scripts/build-qemu builds QEMU 10.0 so, or Debian bookworm's qemu-user 7.2 has them",
                qemu.display()
            ),
        });
    }
    if has("qemu_plugin_register_vcpu_tb_exec_cond_cb") {
        Ok(PluginApi::V3)
    } else if has("qemu_plugin_scoreboard_new") {
        Err(CollectError::Unsupported {
            what: format!(
                "{} ({version}) offers plugin API v2 only (QEMU 9.0), for which bbv has no plugin; use QEMU 6.0-8.2 (API v1) or 9.1 and later (API v3)",
                qemu.display()
            ),
        })
    } else {
        Ok(PluginApi::V1)
    }
}

/// The plugin library for `api`: `explicit`, else `$BBV_PLUGIN`, else the library for the API
/// level next to the running executable (or one directory up, where cargo puts the binaries
/// of integration tests).
pub fn find_plugin(explicit: Option<&Path>, api: PluginApi) -> Result<PathBuf, CollectError> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.into());
    } else if let Some(p) = std::env::var_os("BBV_PLUGIN") {
        candidates.push(p.into());
    } else if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join(api.library()));
            if let Some(up) = dir.parent() {
                candidates.push(up.join(api.library()));
            }
        }
    }
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    Err(CollectError::PluginNotFound {
        library: api.library(),
        tried: tried.join(", "),
    })
}

/// Refuses a `-cpu` model the QEMU does not list in `-cpu help` (QEMU itself would stop only
/// after bbv started it, with its own message).
pub fn check_cpu(qemu: &Path, cpu: &str) -> Result<(), CollectError> {
    // `Haswell,-avx2`: a model and feature switches; the model is what must exist.
    let model = cpu.split(',').next().unwrap_or_default();
    let bad = |why: String| CollectError::Unsupported {
        what: format!("--cpu {cpu}: {why}"),
    };
    if model.is_empty() || model == "help" {
        return Err(bad("expected a CPU model name".into()));
    }
    let out = std::process::Command::new(qemu)
        .args(["-cpu", "help"])
        .output()
        .map_err(|e| CollectError::io(qemu, e))?;
    let list = String::from_utf8_lossy(&out.stdout);
    // Lines are `x86 Haswell  Intel Core...` or `  cortex-a72`: the model is a whole word.
    let known = list
        .lines()
        .any(|l| l.split_whitespace().take(2).any(|w| w == model));
    if known {
        Ok(())
    } else {
        Err(bad(format!(
            "{} knows no CPU model {model:?}; `{} -cpu help` lists them",
            qemu.display(),
            qemu.display()
        )))
    }
}
