//! `bbv gpu count` on the real Accel-Sim traces.

use crate::common::{bbv, data_dir};

fn list(name: &str) -> String {
    data_dir()
        .join("accelsim")
        .join(name)
        .join("kernelslist.g")
        .display()
        .to_string()
}

fn run(args: &[&str]) -> std::process::Output {
    bbv().arg("gpu").arg("count").args(args).output().unwrap()
}

#[test]
fn nvbit_lines_match_the_reference_counts() {
    for (name, kernel, counts) in [
        (
            "vectoradd-100-32-trace-0c94f481",
            "_Z6vecAddIfEvPT_S1_S1_i",
            [344, 341, 10516],
        ),
        (
            "matrixmul-32-32-trace-aba4ea32",
            "_Z8mult_gpuIfEvPT_S1_S1_ii",
            [4416, 4352, 139264],
        ),
    ] {
        let l = list(name);
        for (flags, n) in [
            (&[][..], counts[0]),
            (&["--exclude-pred-off"][..], counts[1]),
            (&["--exclude-pred-off", "--thread-level"][..], counts[2]),
        ] {
            let mut args = vec![l.as_str()];
            args.extend(flags);
            let out = run(&args);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                format!(
                    "kernel 0 - {kernel} - #thread-blocks 1,  kernel instructions {n}, total instructions {n}\nTotal app instructions: {n}\n"
                ),
                "{name} {flags:?}"
            );
        }
    }
}

#[test]
fn demangled_names() {
    let out = run(&[&list("vectoradd-100-32-trace-0c94f481"), "--demangle"]);
    assert!(String::from_utf8(out.stdout).unwrap().starts_with(
        "kernel 0 - void vecAdd<float>(float*, float*, float*, int) - #thread-blocks 1,"
    ));
}

#[test]
fn csv_json_and_opcodes() {
    let l = list("vectoradd-100-32-trace-0c94f481");
    let out = run(&[&l, "--format", "csv"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().nth(1).unwrap(),
        "1, _Z6vecAddIfEvPT_S1_S1_i, 1, 1, 1, 1, 1024, 1, 1, 1024, 344, 344"
    );
    let out = run(&[&l, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"], 344);
    assert_eq!(v["launches"][0]["thread_insts_pred_on"], 10516);
    let out = run(&[&l, "--opcodes"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let sum: u64 = text
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .map(|line| line.rsplit(" = ").next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, 344, "opcode histogram adds up to the warp-level count");
}

#[test]
fn refusals_and_bad_input_exit_2() {
    let l = list("vectoradd-100-32-trace-0c94f481");
    let out = run(&[&l, "--thread-level"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be recovered"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("kernelslist.g");
    std::fs::write(&bad, "MemcpyHtoD,0x10,4\nkernel-9.traceg\n").unwrap();
    let out = run(&[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kernel-9.traceg does not exist"));
    // --keep-going: the damaged launch is skipped, the others keep their numbers.
    let good = data_dir().join("accelsim/vectoradd-100-32-trace-0c94f481/kernel-1.traceg");
    std::fs::copy(&good, dir.path().join("kernel-1.traceg")).unwrap();
    std::fs::copy(&good, dir.path().join("kernel-3.traceg")).unwrap();
    std::fs::write(&bad, "kernel-1.traceg\nkernel-9.traceg\nkernel-3.traceg\n").unwrap();
    let out = run(&[bad.to_str().unwrap(), "--keep-going"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: launch skipped"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("kernel 0 -") && text.contains("kernel 2 -") && !text.contains("kernel 1 -")
    );
    assert!(text.ends_with("Total app instructions: 688\n"), "{text}");
    // A line Accel-Sim would skip (it takes a launch only from a line starting with `kernel`)
    // is refused rather than counted: the list would mean another run to the simulator.
    for line in [good.to_str().unwrap(), " kernel-1.traceg", "k1.traceg"] {
        std::fs::write(&bad, format!("kernel-1.traceg\n{line}\n")).unwrap();
        let out = run(&[bad.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{line}: {err}");
        assert!(
            err.contains(":2: ") && err.contains("would skip this one"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = run(&[&l, "--start-grid", "3", "--end-grid", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&[&l, "--start-grid", "1"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "Total app instructions: 0\n"
    );
}

#[test]
fn block_vectors_match_the_reference_blocks_and_feed_simpoint() {
    for (name, blocks, pcs, insts) in [
        ("vectoradd-100-32-trace-0c94f481", 2, 23, 344),
        ("matrixmul-32-32-trace-aba4ea32", 3, 138, 4416),
    ] {
        let work = tempfile::tempdir().unwrap();
        let prefix = work.path().join("g");
        let out = bbv()
            .args(["gpu", "bbv", &list(name), "-o", prefix.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = std::fs::read_to_string(work.path().join("g.blocks")).unwrap();
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(' ').collect())
            .collect();
        assert_eq!(rows.len(), blocks, "{name}");
        let size: u64 = rows.iter().map(|r| r[3].parse::<u64>().unwrap()).sum();
        assert_eq!(size, pcs, "{name}: every executed PC in exactly one block");
        let bb = std::fs::read_to_string(work.path().join("g.bb")).unwrap();
        let t: Vec<&str> = bb.lines().filter(|l| l.starts_with('T')).collect();
        assert_eq!(t.len(), 1);
        let total: u64 = t[0]
            .split_whitespace()
            .map(|tok| tok.rsplit(':').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(
            total, insts,
            "{name}: the vector adds up to the warp-level count"
        );
        let out = bbv()
            .current_dir(work.path())
            .args(["simpoint", "g.bb", "-k", "1", "-o", "s"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn sample_writes_list_weights_and_report() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("s");
    for extra in [
        &[][..],
        &["--method", "sieve"][..],
        &["--method", "pka"][..],
        &["--method", "stem"][..],
    ] {
        let mut args = vec!["gpu", "sample"];
        let l = list("matrixmul-32-32-trace-aba4ea32");
        args.push(&l);
        args.extend(["-o", dir.to_str().unwrap()]);
        args.extend(extra);
        let out = bbv().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kl = std::fs::read_to_string(dir.join("kernelslist.g")).unwrap();
        assert_eq!(
            kl.lines().filter(|l| l.starts_with("MemcpyHtoD")).count(),
            2
        );
        // Accel-Sim's rule: a launch is a line starting with `kernel`, a file beside the list
        // (here a link to the trace's own file).
        assert_eq!(kl.lines().last().unwrap(), "kernel-1.traceg");
        assert_eq!(
            std::fs::read_link(dir.join("kernel-1.traceg")).unwrap(),
            std::fs::canonicalize(
                data_dir().join("accelsim/matrixmul-32-32-trace-aba4ea32/kernel-1.traceg")
            )
            .unwrap()
        );
        let w = std::fs::read_to_string(dir.join("weights.csv")).unwrap();
        assert_eq!(
            w.lines().nth(1).unwrap(),
            "0,_Z8mult_gpuIfEvPT_S1_S1_ii,1,1"
        );
        let r = std::fs::read_to_string(dir.join("report")).unwrap();
        assert!(
            r.contains("warp instructions | 4416 | 4416.0 | 0.0000%"),
            "{r}"
        );
    }
}
