//! Each class of bad input issue 36 found, one by one: exit 2, a message naming the file or
//! option at fault (and saying what is wrong), every output as it was. The seeded mutator in
//! `fuzz_cli` covers the same ground at random.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{bbv, contents, copy_dir, gzip_job, text_input};

fn edit(path: &Path, f: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, f(text)).unwrap();
}

/// `bbv CMD DIR` on a copy of `run` broken by `breaks` must exit 2 with a message holding
/// every one of `want`, and change no file but the broken one.
fn refused(
    run: &Path,
    work: &Path,
    cmd: &str,
    file: &str,
    breaks: impl FnOnce(&Path),
    want: &[&str],
) {
    let dir = work.join(format!("{cmd}-{file}-{}", want[0].len()));
    copy_dir(run, &dir);
    breaks(&dir.join(file));
    let broken = dir.join(file);
    let before: BTreeMap<_, _> = contents(&dir)
        .into_iter()
        .filter(|(p, _)| *p != broken)
        .collect();
    let out = bbv().arg(cmd).arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{cmd} with {file} broken: {err}"
    );
    for w in want {
        assert!(
            err.contains(w),
            "{cmd} with {file} broken: {err:?} lacks {w:?}"
        );
    }
    let after: BTreeMap<_, _> = contents(&dir)
        .into_iter()
        .filter(|(p, _)| *p != broken)
        .collect();
    assert!(
        before == after,
        "{cmd} with {file} broken changed outputs: {err}"
    );
}

#[test]
fn broken_run_directories_name_the_file_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let input = w.join("input.txt");
    text_input(&input, 100_000);
    let run = w.join("run");
    gzip_job(&["run", "--interval", "1000000"], &run, &input);
    let summary = std::fs::read_to_string(run.join("summary.txt")).unwrap();
    // Fewer intervals than the default --max-k 30: k is clamped, and the summary says so.
    assert!(summary.contains("--max-k 30 limited to the"), "{summary}");

    let junk = |p: &Path| {
        let mut b = std::fs::read(p).unwrap();
        b.extend_from_slice(b"3,\xff\xfe,1\n");
        std::fs::write(p, b).unwrap();
    };
    refused(
        &run,
        w,
        "regions",
        "bic.csv",
        junk,
        &["bic.csv:", "not UTF-8 text"],
    );
    let folder = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir(p).unwrap();
    };
    refused(
        &run,
        w,
        "regions",
        "regions.csv",
        folder,
        &["regions.csv: is a folder"],
    );
    refused(
        &run,
        w,
        "report",
        "report.html",
        folder,
        &["report.html: is a folder"],
    );
    let zero = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", p).unwrap();
    };
    for f in ["bb.out", "simpoint.labels", "simpoint.weights", "marks.out"] {
        refused(&run, w, "regions", f, zero, &[&format!("{f}: is a device")]);
    }
    let first_line_dropped =
        |p: &Path| edit(p, |t| t.lines().skip(1).map(|l| format!("{l}\n")).collect());
    refused(
        &run,
        w,
        "report",
        "simpoint.simpoints",
        first_line_dropped,
        &[
            "simpoint.simpoints: no point for cluster",
            "simpoint.labels uses",
        ],
    );
    refused(
        &run,
        w,
        "report",
        "summary.json",
        |p| {
            edit(p, |t| {
                let mut v: serde_json::Value = serde_json::from_str(&t).unwrap();
                v["points"][0]["weight"] = 1e26.into();
                v.to_string()
            })
        },
        &["summary.json: point 1", "is not a fraction from 0 to 1"],
    );
    let duplicated = |p: &Path| edit(p, |t| format!("{}\n{t}", t.lines().next().unwrap()));
    refused(
        &run,
        w,
        "regions",
        "simpoint.weights",
        duplicated,
        &["simpoint.weights: line 2", "second weight"],
    );
    refused(
        &run,
        w,
        "regions",
        "simpoint.weights",
        |p| {
            edit(p, |t| {
                let mut lines: Vec<String> = t.lines().map(String::from).collect();
                let cluster = lines[0].split_whitespace().nth(1).unwrap().to_string();
                lines[0] = format!("0.99 {cluster}");
                lines.join("\n") + "\n"
            })
        },
        &["simpoint.weights: ", "weights sum to", "not 1"],
    );
    refused(
        &run,
        w,
        "regions",
        "simpoint.labels",
        |p| {
            // A point's own interval labelled with another cluster.
            let points = std::fs::read_to_string(p.with_file_name("simpoint.simpoints")).unwrap();
            let (interval, cluster) = points.lines().next().unwrap().split_once(' ').unwrap();
            let (i, c): (usize, usize) = (interval.parse().unwrap(), cluster.parse().unwrap());
            edit(p, |t| {
                let mut lines: Vec<String> = t.lines().map(String::from).collect();
                lines[i] = format!("{} 0", c + 1);
                lines.join("\n") + "\n"
            })
        },
        &["simpoint.simpoints: line 1", "is labelled"],
    );
    refused(
        &run,
        w,
        "regions",
        "marks.out",
        |p| std::fs::write(p, "").unwrap(),
        &["marks.out: empty"],
    );
    let image_twice = |p: &Path| edit(p, |t| format!("{t}{}\n", t.lines().nth(1).unwrap()));
    refused(
        &run,
        w,
        "regions",
        "images.tsv",
        image_twice,
        &["images.tsv:", "each image once"],
    );
    refused(
        &run,
        w,
        "regions",
        "summary.json",
        |p| std::fs::remove_file(p).unwrap(),
        &[
            "summary.json: missing",
            "not a complete `bbv run` output directory",
        ],
    );
    // A truncated file: the huge sparse kind too, read no further than a line's limit.
    refused(
        &run,
        w,
        "regions",
        "bb.out",
        |p| {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(3 << 30)
                .unwrap()
        },
        &["bb.out:", "line longer than 67108864 bytes"],
    );
}

#[test]
fn bad_options_and_vector_files_name_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let bb = w.join("v29.bb");
    let text: String = (0..29)
        .map(|i| format!("T:1:{} :2:{} :3:5\n", 10 + i, 40 - i))
        .collect();
    std::fs::write(&bb, text).unwrap();
    let run = |args: &[&str]| {
        let o = bbv().current_dir(w).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["simpoint", "v29.bb"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("v29.bb: k = 30 is larger than the number of vectors (29)")
            && err.contains("--max-k"),
        "{err}"
    );
    let (code, err) = run(&["simpoint", "v29.bb", "-maxK", "10"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("-loadFVFile v29.bb") && err.contains("--max-k"),
        "{err}"
    );
    let list =
        crate::common::data_dir().join("accelsim/vectoradd-100-32-trace-12f5cb88/kernelslist.g");
    let (code, err) = run(&["gpu", "bbv", list.to_str().unwrap(), "-o", "missing/app"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("missing: no such folder (for the output missing/app"),
        "{err}"
    );
    assert!(!w.join("missing").exists());
    for (args, want) in [
        (
            &["run", "--max-k", "4294967296"][..],
            "--max-k 4294967296: at most 1048576",
        ),
        (
            &["run", "--interval", "9223372036854775808"][..],
            "--interval 9223372036854775808: at most",
        ),
        (
            &["collect", "--interval-size", "9223372036854775808"][..],
            "--interval-size 9223372036854775808: at most",
        ),
    ] {
        let mut a = args.to_vec();
        a.extend(
            ["-o", "r", "--", "true"]
                .iter()
                .skip(if args[0] == "collect" { 2 } else { 0 }),
        );
        let (code, err) = run(&a);
        assert_eq!(code, Some(2), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
    assert!(!w.join("r").exists());
    // A malformed token on a 3 MB trace line: the message quotes 200 bytes of it.
    let trace = w.join("trace");
    copy_dir(list.parent().unwrap(), &trace);
    let k = trace.join("kernel-1.traceg");
    edit(&k, |t| {
        let at = t.find("\n0").unwrap() + 1;
        format!("{}{} {}", &t[..at], "Z".repeat(3 << 20), &t[at..])
    });
    let (code, err) = run(&[
        "gpu",
        "count",
        trace.join("kernelslist.g").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{}", &err[..err.len().min(500)]);
    assert!(
        err.contains("kernel-1.traceg:") && err.len() < 1000,
        "{} bytes: {}",
        err.len(),
        &err[..err.len().min(500)]
    );
}

/// A panic in the QEMU plugin (injected where the first block is translated, and at the guest's
/// exit) never unwinds into QEMU: the plugin's guard writes it where the host looks, QEMU ends,
/// and bbv says the plugin failed and why (exit 2), writing no vectors. Both plugins: API v1
/// under Debian's QEMU 7.2, v3 under QEMU 10.
#[test]
fn a_panic_in_the_plugin_is_reported_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let qemu10 = crate::qemu10_cli::qemu10().join("qemu-x86_64");
    let cases = [
        (None, "tb_trans"),
        (None, "exit"),
        (Some(&qemu10), "tb_trans"),
        (Some(&qemu10), "exit"),
    ];
    for (qemu, point) in cases {
        let mut c = bbv();
        c.arg("collect");
        if let Some(q) = qemu {
            c.arg("--qemu").arg(q);
        }
        let out = c
            .current_dir(dir.path())
            .env(bbv_plugin_contract::INJECT_PANIC_ENV, point)
            .args(["--interval-size", "100000"])
            .args(["--bb-out-file", &format!("{point}.bb")])
            .args(["--pc-out-file", &format!("{point}.pc")])
            .args(["--", "/bin/echo", "ran"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{point}: {err}");
        let said = "the QEMU plugin failed: the plugin panicked (a bug in bbv)";
        assert!(err.contains(said), "{point}: {err}");
        assert!(
            err.contains(&format!("injected at {point}")),
            "{point}: {err}"
        );
        // At the exit the guest has run to its end: its own output is kept.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout == "ran\n", point == "exit", "{point}: {stdout:?}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no vector or PC file written"
    );
}
