//! `bbv simpoint` behaviour beyond byte identity: option styles, inputs, bad input.

use std::io::Write;
use std::path::PathBuf;

use crate::common::{bbv, data_dir, files_in, run_in};

fn golden(path: &str) -> PathBuf {
    data_dir().join("simpoint-golden").join(path)
}

fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn small_bb() -> Vec<u8> {
    std::fs::read(golden("bzip2_9_small/bzip2_9_small.bb")).unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `bbv simpoint gzip_9.bb.gz ARGS -o g` and checks that each `(ours, golden)` pair of
/// files is identical to SimPoint's in `golden_case`; returns bbv's stdout.
fn modern_run_matches(args: &[&str], golden_case: &str, files: &[(&str, &str)]) -> String {
    let work = tempfile::tempdir().unwrap();
    let input = golden("gzip_9/gzip_9.bb.gz");
    let mut all = vec!["simpoint", input.to_str().unwrap()];
    all.extend(args);
    all.extend(["-o", "g"]);
    let out = run_in(work.path(), &all);
    assert!(out.status.success(), "{}", stderr(&out));
    for (mine, theirs) in files {
        assert_eq!(
            std::fs::read(work.path().join(mine)).unwrap(),
            std::fs::read(golden(golden_case).join(theirs)).unwrap(),
            "{mine}"
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn modern_options_match_simpoint_files() {
    let summary = modern_run_matches(
        &["--max-k", "20", "--var-length"],
        "gzip_9/varlen-maxK20",
        &[
            ("g.simpoints", "simpoints"),
            ("g.weights", "weights"),
            ("g.labels", "labels"),
        ],
    );
    assert!(summary.contains("picked k ="), "{summary}");
}

#[test]
fn coverage_files_take_simpoints_names() {
    modern_run_matches(
        &[
            "-k",
            "5:15",
            "--init",
            "ff",
            "--dim",
            "10",
            "--coverage",
            "0.9",
        ],
        "gzip_9/ff-dim10-cov90",
        &[
            ("g.simpoints.lpt0.9", "simpoints.lpt0.9"),
            ("g.weights.lpt0.9", "weights.lpt0.9"),
        ],
    );
}

#[test]
fn json_reports_pick_bics_points_and_files() {
    let work = tempfile::tempdir().unwrap();
    let input = golden("gzip_9/gzip_9.bb.gz");
    let out = run_in(
        work.path(),
        &[
            "simpoint",
            input.to_str().unwrap(),
            "--max-k",
            "30",
            "--json",
            "-o",
            "x",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = std::fs::read_to_string(golden("gzip_9/search-maxK30/simpoints")).unwrap();
    let points = v["simpoints"].as_array().unwrap();
    assert_eq!(points.len(), want.lines().count());
    assert_eq!(
        v["k"].as_u64().unwrap() as usize,
        v["bic"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["k"].as_u64().unwrap() as usize)
            .find(|&k| k == v["k"].as_u64().unwrap() as usize)
            .unwrap()
    );
    let first: Vec<&str> = want.lines().next().unwrap().split(' ').collect();
    assert_eq!(points[0]["interval"].to_string(), first[0]);
    assert_eq!(points[0]["cluster"].to_string(), first[1]);
    let total: f64 = points.iter().map(|p| p["weight"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-9);
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
}

#[cfg(unix)]
#[test]
fn symlink_named_simpoint_is_a_drop_in() {
    let work = tempfile::tempdir().unwrap();
    let link = work.path().join("simpoint");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_bbv"), &link).unwrap();
    let input = golden("gzip_9/gzip_9.bb.gz");
    let out = std::process::Command::new(&link)
        .current_dir(work.path())
        .args([
            "-loadFVFile",
            input.to_str().unwrap(),
            "-inputVectorsGzipped",
            "-k",
            "10",
            "-saveSimpoints",
            "s",
            "-saveSimpointWeights",
            "w",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(work.path().join("s")).unwrap(),
        std::fs::read(golden("gzip_9/fixed-k10/simpoints")).unwrap()
    );
    // SimPoint logs to stdout; so do we in its mode.
    assert!(String::from_utf8_lossy(&out.stdout).contains("Run number 1"));
}

/// Runs `simpoint -loadFVFile FILE -k K -saveSimpoints s -saveSimpointWeights w` on `content`
/// and returns (output, simpoints text).
fn run_on(content: &[u8], k: &str) -> (std::process::Output, Option<String>, Vec<String>) {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("in.bb");
    std::fs::write(&file, content).unwrap();
    let out = run_in(
        work.path(),
        &[
            "simpoint",
            "-loadFVFile",
            "in.bb",
            "-k",
            k,
            "-saveSimpoints",
            "s",
            "-saveSimpointWeights",
            "w",
            "-saveLabels",
            "l",
        ],
    );
    let s = std::fs::read_to_string(work.path().join("s")).ok();
    let left: Vec<String> = files_in(work.path())
        .into_iter()
        .filter(|f| f != "in.bb")
        .collect();
    (out, s, left)
}

fn assert_rejected(content: &[u8], k: &str, needle: &str) {
    let (out, _, left) = run_on(content, k);
    assert_eq!(out.status.code(), Some(2), "{needle}: {}", stderr(&out));
    let msg = stderr(&out);
    assert!(msg.starts_with("bbv: "), "{msg}");
    assert!(msg.contains(needle), "expected {needle:?} in {msg:?}");
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn malformed_tokens_name_file_line_and_column() {
    assert_rejected(
        b"T:1:5\nT:12:abc\n",
        "1",
        "in.bb:2:6: expected a non-negative number",
    );
    assert_rejected(b"T:0:5\n", "1", "in.bb:1:3: block id 0");
    assert_rejected(b"T:1:5 :3:-1\n", "1", "in.bb:1:10: negative count");
    assert_rejected(b"T:1:5 3:4\n", "1", "in.bb:1:7: expected ':'");
    assert_rejected(b"T:1:5\nT\nT:2:3\n", "1", "in.bb:2:1: 'T' line with no");
    assert_rejected(
        b"T:1:5\nT:2:0\n",
        "1",
        "in.bb:2: vector with a total count of 0",
    );
    assert_rejected(b"# nothing\n", "1", "no frequency vectors");
    assert_rejected(
        b"T:1:5\nT:2:3\n",
        "3",
        "k = 3 is larger than the number of vectors (2)",
    );
}

#[test]
fn corrupt_and_truncated_compressed_input() {
    let gz = gzip_bytes(&small_bb());
    assert_rejected(&gz[..gz.len() / 2], "2", "corrupt or truncated gzip data");
    let mut bad = gz.clone();
    let mid = bad.len() / 2;
    for b in &mut bad[mid..mid + 64] {
        *b ^= 0x5a;
    }
    // Corrupt deflate data may decode to garbage before the CRC check catches it; either way
    // the file is named and nothing is written.
    assert_rejected(&bad, "2", "in.bb:");
    let zst = zstd::encode_all(&small_bb()[..], 3).unwrap();
    assert_rejected(
        &zst[..zst.len() - 10],
        "2",
        "corrupt or truncated zstd data",
    );
}

#[test]
fn compression_is_detected_from_content() {
    let plain = small_bb();
    let (o1, s1, _) = run_on(&plain, "5");
    assert!(o1.status.success(), "{}", stderr(&o1));
    let (o2, s2, _) = run_on(&gzip_bytes(&plain), "5");
    assert!(o2.status.success(), "{}", stderr(&o2));
    let (o3, s3, _) = run_on(&zstd::encode_all(&plain[..], 3).unwrap(), "5");
    assert!(o3.status.success(), "{}", stderr(&o3));
    assert_eq!(s1, s2);
    assert_eq!(s1, s3);
    assert_eq!(s1.unwrap().lines().count(), 5);
}

#[test]
fn last_line_without_newline_is_read() {
    let mut text = small_bb();
    assert_eq!(text.pop(), Some(b'\n'));
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.bb"), &text).unwrap();
    let out = run_in(
        work.path(),
        &[
            "simpoint",
            "-loadFVFile",
            "a.bb",
            "-k",
            "3",
            "-dim",
            "noProject",
            "-saveVectorWeights",
            "vw",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = std::fs::read_to_string(work.path().join("vw"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        lines, 2860,
        "every vector, including the last line, is read"
    );
}

#[test]
fn option_errors_exit_2_without_outputs() {
    let input = golden("gzip_9/gzip_9.bb.gz");
    let input = input.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "-loadFVFile",
                input,
                "-k",
                "5",
                "-maxK",
                "10",
                "-saveSimpoints",
                "s",
            ],
            "-maxK cannot be combined",
        ),
        (
            &["-loadFVFile", input, "-saveSimpoints", "s"],
            "needs -maxK",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "10",
                "-coveragePct",
                "1.5",
                "-saveSimpoints",
                "s",
            ],
            "-coveragePct",
        ),
        (
            &["-loadFVFile", input, "-maxK", "0", "-saveSimpoints", "s"],
            "-maxK",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "5",
                "-dim",
                "0",
                "-saveSimpoints",
                "s",
            ],
            "-dim",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "5",
                "-initkm",
                "kpp",
                "-saveSimpoints",
                "s",
            ],
            "-initkm",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "5",
                "-bogus",
                "1",
                "-saveSimpoints",
                "s",
            ],
            "unknown option '-bogus'",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "5",
                "-iters",
                "-3",
                "-saveSimpoints",
                "s",
            ],
            "-iters",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-maxK",
                "5",
                "-sampleSize",
                "999999",
                "-saveSimpoints",
                "s",
            ],
            "-sampleSize",
        ),
        (
            &[
                "-loadFVFile",
                input,
                "-k",
                "4",
                "-loadVectorWeights",
                "nope",
                "-fixedLength",
                "on",
                "-saveSimpoints",
                "s",
            ],
            "contradicts",
        ),
        (&["-loadFVFile", input, "-maxK"], "needs a value"),
        (
            &[
                "-loadFVFile",
                "/nonexistent/x.bb",
                "-maxK",
                "5",
                "-saveSimpoints",
                "s",
            ],
            "/nonexistent/x.bb",
        ),
        (
            &[input, "--max-k", "5", "-k", "3", "-o", "s"],
            "cannot be combined",
        ),
        (&[input, "--dim", "zero", "-o", "s"], "--dim"),
        (&[input, "--coverage", "0", "-o", "s"], "--coverage"),
        (&[input, "--no-such-flag"], "--no-such-flag"),
    ];
    for (args, needle) in cases {
        let work = tempfile::tempdir().unwrap();
        let out = bbv()
            .current_dir(work.path())
            .arg("simpoint")
            .args(*args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(needle),
            "{args:?}: {needle:?} not in {}",
            stderr(&out)
        );
        assert!(files_in(work.path()).is_empty(), "{args:?} left files");
    }
}

#[test]
fn unwritable_output_leaves_nothing_behind() {
    let work = tempfile::tempdir().unwrap();
    let input = golden("gzip_9/gzip_9.bb.gz");
    let out = run_in(
        work.path(),
        &[
            "simpoint",
            "-loadFVFile",
            input.to_str().unwrap(),
            "-k",
            "3",
            "-saveLabels",
            "l",
            "-saveSimpoints",
            "missing-dir/s",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing-dir/s"), "{}", stderr(&out));
    assert!(
        files_in(work.path()).is_empty(),
        "{:?}",
        files_in(work.path())
    );
}

#[test]
fn saved_vectors_load_back_to_the_same_clustering() {
    let work = tempfile::tempdir().unwrap();
    let input = golden("bzip2_9_small/bzip2_9_small.bb");
    let w = work.path();
    let out = run_in(
        w,
        &[
            "simpoint",
            "-loadFVFile",
            input.to_str().unwrap(),
            "-k",
            "7",
            "-saveVectorsTxtFmt",
            "v.txt",
            "-saveVectorsBinFmt",
            "v.bin",
            "-saveSimpoints",
            "s0",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for (opt, file) in [
        ("-loadVectorsTxtFmt", "v.txt"),
        ("-loadVectorsBinFmt", "v.bin"),
    ] {
        let out = run_in(
            w,
            &[
                "simpoint",
                opt,
                file,
                "-fixedLength",
                "off",
                "-k",
                "7",
                "-saveSimpoints",
                "s1",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            std::fs::read(w.join("s0")).unwrap(),
            std::fs::read(w.join("s1")).unwrap(),
            "{opt}"
        );
    }
    let out = run_in(
        w,
        &[
            "simpoint",
            "-loadVectorsTxtFmt",
            "v.txt",
            "-k",
            "7",
            "-saveSimpoints",
            "s2",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("-fixedLength"));
}

#[test]
fn saved_projection_matrix_loads_back() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let input = golden("bzip2_9_small/bzip2_9_small.bb");
    let input = input.to_str().unwrap();
    let out = run_in(
        w,
        &[
            "simpoint",
            "-loadFVFile",
            input,
            "-k",
            "4",
            "-saveProjMatrixBinFmt",
            "p.bin",
            "-saveSimpoints",
            "s0",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run_in(
        w,
        &[
            "simpoint",
            "-loadFVFile",
            input,
            "-k",
            "4",
            "-loadProjMatrixBinFmt",
            "p.bin",
            "-saveSimpoints",
            "s1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(w.join("s0")).unwrap(),
        std::fs::read(w.join("s1")).unwrap()
    );
}
