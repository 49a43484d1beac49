//! `bbv trace` on AArch64 and RISC-V 64 guests: a C program with libc calls, built by Debian's
//! cross compilers dynamically linked and static, traced region by region. Every trace holds
//! exactly its warmup, region and tail records; ChampSim's own classification (the harness
//! scripts/champsim builds) agrees with bbv's on every record; calls and returns, which these
//! ISAs make without touching the stack pointer, are seen as calls and returns, about as many
//! of each; and the real ChampSim simulates a region without reaching the end of its trace.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::collect_cli::build;
use crate::common::{bbv, champsim_bin};
use crate::trace_cli::{json, read_trace};

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
        .args(["--tail", "2000", "--"])
        .arg(&prog)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let regions = json(&run.join("traces/regions.json"));
    let replay = json(&run.join("replay.json"));
    let list = regions["regions"].as_array().unwrap();
    assert!(!list.is_empty(), "{name}");
    let mut smallest: Option<(u64, String)> = None;
    let mut all: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in list {
        let id = r["id"].as_u64().unwrap();
        let (w, n, tail) = (
            r["warmup_instructions"].as_u64().unwrap(),
            r["region_instructions"].as_u64().unwrap(),
            r["tail_instructions"].as_u64().unwrap(),
        );
        let replayed = replay["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"].as_u64() == Some(id))
            .unwrap();
        assert_eq!(
            replayed["replay_length"].as_u64(),
            Some(n),
            "{name} region {id}"
        );
        let trace = run.join("traces").join(r["trace"].as_str().unwrap());
        let (records, ours) = read_trace(&trace);
        assert_eq!(records, w + n + tail, "{name} region {id}");
        let h = Command::new(bin.join("champsim-branches"))
            .arg(&trace)
            .output()
            .unwrap();
        assert!(h.status.success(), "{}", String::from_utf8_lossy(&h.stderr));
        let text = String::from_utf8_lossy(&h.stdout);
        for line in text
            .lines()
            .filter(|l| l.starts_with("BRANCH_") || l.starts_with("NOT_"))
        {
            let f: Vec<&str> = line.split(' ').collect();
            let theirs = (f[1].parse::<u64>().unwrap(), f[2].parse::<u64>().unwrap());
            let mine = ours.get(f[0]).copied().unwrap_or((0, 0));
            assert_eq!(mine, theirs, "{name} region {id} {}", f[0]);
        }
        assert!(text.contains(&format!("RECORDS {records}\n")), "{text}");
        for (k, c) in ours {
            *all.entry(k).or_default() += c.0;
        }
        let cmd = r["champsim_command"].as_str().unwrap().to_string();
        if smallest.as_ref().is_none_or(|s| w + n < s.0) {
            smallest = Some((w + n, cmd));
        }
    }
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
    assert!(
        calls.abs_diff(returns) <= 100 * list.len() as u64,
        "{name}: {all:?}"
    );
    assert!(count("BRANCH_CONDITIONAL") > 1000, "{name}: {all:?}");
    assert_eq!(count("BRANCH_OTHER"), 0, "{name}: {all:?}");
    eprintln!("{name}: {} regions, {all:?}", list.len());
    let (_, cmd) = smallest.unwrap();
    let args: Vec<&str> = cmd.split(' ').skip(1).collect();
    let c = Command::new(bin.join("champsim"))
        .current_dir(run.join("traces"))
        .args(&args)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&c.stdout);
    assert!(c.status.success(), "{name}: {out}");
    assert!(!out.contains("Reached end of trace"), "{name}: {out}");
    assert!(out.contains("Simulation complete"), "{name}: {out}");
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
