//! The plugin's ChampSim records (`record=PATH`) of a real run, checked against bbv's own
//! counts and run through the real ChampSim and its branch harness (scripts/champsim).

use std::path::Path;
use std::process::{Command, Stdio};

use bbv_champsim::stats::Figures;
use bbv_champsim::{BranchKind, Record, RECORD_BYTES};

use crate::common::{bbv, champsim_bin, guest_env, record_whole_run, text_input};

/// The sums of `metrics.csv`'s columns, by name.
fn metric_totals(csv: &Path) -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let names: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut sums = std::collections::HashMap::new();
    for l in lines {
        for (n, v) in names.iter().zip(l.split(',')) {
            *sums.entry(n.to_string()).or_insert(0) += v.parse::<u64>().unwrap();
        }
    }
    sums
}

#[test]
fn records_of_a_real_run_match_bbvs_counts_and_run_in_champsim() {
    let bin = champsim_bin();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("input.txt");
    text_input(&input, 20_000);
    let guest = ["/bin/gzip", "-9", "-c", input.to_str().unwrap()];
    // The plugin's records of the whole run, per rep iteration as bbv collect counts below.
    let trace = d.join("run.champsim");
    let guest: Vec<String> = guest.iter().map(|s| s.to_string()).collect();
    record_whole_run(&guest, &trace, ",interval=100000000,count_rep=iteration");
    // bbv's own counts of the same run: instructions counted per rep iteration, as records are.
    let csv = d.join("m.csv");
    let o = guest_env(&mut bbv())
        .current_dir(d)
        .args([
            "collect",
            "--count-rep",
            "iteration",
            "--interval-size",
            "100000",
            "--tail",
        ])
        .arg("--metrics-out-file")
        .arg(&csv)
        .args(["--bb-out-file", "bb.out", "--pc-out-file", "pc.out", "--"])
        .args(&guest)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = metric_totals(&csv);
    // The records, read back and classified as ChampSim does.
    let bytes = std::fs::read(&trace).unwrap();
    assert_eq!(bytes.len() % RECORD_BYTES, 0);
    let mut kinds = std::collections::BTreeMap::new();
    let (mut taken, mut loads, mut stores) = (0u64, 0u64, 0u64);
    for chunk in bytes.chunks_exact(RECORD_BYTES) {
        let r = Record::from_bytes(chunk.try_into().unwrap());
        let k = BranchKind::of(&r);
        *kinds.entry(k.name()).or_insert(0u64) += 1;
        taken += u64::from(k != BranchKind::NotBranch && r.branch_taken);
        loads += r.src_mem.iter().filter(|&&a| a != 0).count() as u64;
        stores += r.dst_mem.iter().filter(|&&a| a != 0).count() as u64;
    }
    let records = (bytes.len() / RECORD_BYTES) as u64;
    assert_eq!(records, m["instructions"], "one record per instruction");
    let near = |ours: u64, theirs: u64, pct: f64, what: &str| {
        let off = 100.0 * (ours as f64 - theirs as f64).abs() / theirs as f64;
        assert!(
            off <= pct,
            "{what}: {ours} records against {theirs} counted ({off:.3}%)"
        );
    };
    near(taken, m["taken_branches"], 0.5, "taken branches");
    near(loads, m["loads"], 0.5, "loads");
    near(stores, m["stores"], 1.0, "stores");
    // ChampSim's own classification of the same file agrees record for record in its counts.
    let h = Command::new(bin.join("champsim-branches"))
        .arg(&trace)
        .output()
        .unwrap();
    assert!(h.status.success());
    for line in String::from_utf8_lossy(&h.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let n: u64 = f[1].parse().unwrap();
        match f[0] {
            "RECORDS" => assert_eq!(n, records),
            "LOADS" => assert_eq!(n, loads),
            "STORES" => assert_eq!(n, stores),
            kind => assert_eq!(n, kinds.get(kind).copied().unwrap_or(0), "{kind}"),
        }
    }
    for k in [
        "BRANCH_CONDITIONAL",
        "BRANCH_DIRECT_CALL",
        "BRANCH_RETURN",
        "BRANCH_DIRECT_JUMP",
    ] {
        assert!(kinds.get(k).copied().unwrap_or(0) > 1000, "{k}: {kinds:?}");
    }
    assert_eq!(kinds.get("BRANCH_OTHER"), None, "{kinds:?}");
    // And the real simulator runs it.
    let c = Command::new(bin.join("champsim"))
        .args([
            "--warmup-instructions",
            "200000",
            "--simulation-instructions",
            "500000",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&c.stdout);
    assert!(c.status.success(), "{out}");
    assert!(!out.contains("Reached end of trace"), "{out}");
    let f = Figures::parse(&out).unwrap();
    assert!(f.instructions >= 500_000 && f.cycles > 0, "{f:?}");
    eprintln!(
        "{records} records ({kinds:?}), taken {taken} vs {}, loads {loads} vs {}, stores {stores} vs {}; ChampSim IPC {:.3}",
        m["taken_branches"],
        m["loads"],
        m["stores"],
        1.0 / f.cpi()
    );
}
