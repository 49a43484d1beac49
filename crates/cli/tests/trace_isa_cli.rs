//! `bbv trace` on AArch64 and RISC-V 64 guests: a C program with libc calls, built by Debian's
//! cross compilers dynamically linked and static, traced region by region. Every trace holds
//! exactly its warmup, region and tail records; ChampSim's own classification (the harness
//! scripts/champsim builds) agrees with bbv's on every record; calls and returns, which these
//! ISAs make without touching the stack pointer, are seen as calls and returns, about as many
//! of each; and the real ChampSim simulates a region without reaching the end of its trace.

use std::path::Path;
use std::process::Stdio;

use crate::collect_cli::build;
use crate::common::{bbv, champsim_bin};
use crate::trace_cli::{checked_regions, json};

/// Runs, traces and checks one build of sort_libc.c.
fn traced_and_checked(d: &Path, bin: &Path, cc: &str, name: &str, flags: &[&str]) {
    let prog = build(d, cc, "sort_libc.c", name, flags);
    let run = d.join(format!("run-{name}"));
    let o = bbv()
        .env_remove("QEMU_LD_PREFIX")
        .args(["run", "-o"])
        .arg(&run)
        .args(["--interval", "300000", "--warmup", "300000", "--max-k", "3"])
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "618350466\n", "{name}");
    let o = bbv()
        .env_remove("QEMU_LD_PREFIX")
        .arg("trace")
        .arg(&run)
        .args(["--tail", "2000", "--short-warmups", "--"])
        .arg(&prog)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let all = checked_regions(&run, bin, name);
    let list = json(&run.join("traces/regions.json"))["regions"]
        .as_array()
        .unwrap()
        .len() as u64;
    // qsort calls the comparison function through a register and it returns: over the
    // regions, calls and returns each in the thousands, and as many of one as of the other,
    // give or take the frames open at the traces' ends.
    let count = |k: &str| all.get(k).copied().unwrap_or(0);
    let calls = count("BRANCH_DIRECT_CALL") + count("BRANCH_INDIRECT_CALL");
    let returns = count("BRANCH_RETURN");
    assert!(
        count("BRANCH_INDIRECT_CALL") > 1000 && returns > 1000,
        "{name}: {all:?}"
    );
    assert!(calls.abs_diff(returns) <= 100 * list, "{name}: {all:?}");
    assert!(count("BRANCH_CONDITIONAL") > 1000, "{name}: {all:?}");
    assert_eq!(count("BRANCH_OTHER"), 0, "{name}: {all:?}");
    eprintln!("{name}: {list} regions, {all:?}");
}

#[test]
fn foreign_guests_are_traced_and_simulated() {
    let bin = champsim_bin();
    let t = tempfile::tempdir().unwrap();
    for cc in ["aarch64-linux-gnu-gcc", "riscv64-linux-gnu-gcc"] {
        let isa = cc.split('-').next().unwrap();
        traced_and_checked(t.path(), &bin, cc, &format!("{isa}-dynamic"), &["-O2"]);
        traced_and_checked(
            t.path(),
            &bin,
            cc,
            &format!("{isa}-static"),
            &["-O2", "-static"],
        );
    }
}
