//! Byte-identity with SimPoint 3.2 on every case of `shared/data/simpoint-golden`, run exactly as
//! its README says.

use std::path::Path;

use crate::common::{data_dir, files_in, run_in};

const CASES: &[(&str, &str)] = &[
    ("bzip2_9", "dim30-k6-bic07"),
    ("bzip2_9", "ff-dim10-cov90"),
    ("bzip2_9", "fixed-k10"),
    ("bzip2_9", "iters5-k20"),
    ("bzip2_9", "sample3000"),
    ("bzip2_9", "saveall-k4to8"),
    ("bzip2_9", "search-maxK30"),
    ("bzip2_9", "seeds10-custom"),
    ("bzip2_9", "varlen-maxK20"),
    ("bzip2_9_small", "noproject-k5"),
    ("bzip2_9_small", "proj-files-k7"),
    ("gzip_9", "ff-dim10-cov90"),
    ("gzip_9", "fixed-k10"),
    ("gzip_9", "search-maxK30"),
    ("gzip_9", "varlen-maxK20"),
    ("gzip_9_varlen", "fixed-maxK20"),
    ("gzip_9_varlen", "varlen-ff-k12"),
    ("gzip_9_varlen", "varlen-maxK20"),
];

fn bbv_file(dir: &Path) -> String {
    files_in(dir)
        .into_iter()
        .find(|f| f.ends_with(".bb") || f.ends_with(".bb.gz"))
        .expect("a .bb or .bb.gz file")
}

fn check_case(bbv_name: &str, case: &str) {
    let root = data_dir().join("simpoint-golden").join(bbv_name);
    let case_dir = root.join(case);
    let input = root.join(bbv_file(&root));
    let options = std::fs::read_to_string(case_dir.join("options.txt")).unwrap();
    let work = tempfile::tempdir().unwrap();
    let input = input.to_str().unwrap().to_string();
    let mut args = vec!["simpoint", "-loadFVFile", &input];
    if input.ends_with(".gz") {
        args.push("-inputVectorsGzipped");
    }
    args.extend(options.split_whitespace());
    args.extend([
        "-saveSimpoints",
        "simpoints",
        "-saveSimpointWeights",
        "weights",
        "-saveLabels",
        "labels",
    ]);
    let out = run_in(work.path(), &args);
    assert!(
        out.status.success(),
        "{bbv_name}/{case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<String> = files_in(&case_dir)
        .into_iter()
        .filter(|f| f != "options.txt" && f != "simpoint.log")
        .collect();
    let produced = files_in(work.path());
    assert_eq!(
        produced, expected,
        "{bbv_name}/{case}: set of files written"
    );
    for f in expected {
        let want = std::fs::read(case_dir.join(&f)).unwrap();
        let got = std::fs::read(work.path().join(&f)).unwrap();
        if want != got {
            let line = want
                .split(|&b| b == b'\n')
                .zip(got.split(|&b| b == b'\n'))
                .position(|(a, b)| a != b)
                .map_or(0, |p| p + 1);
            panic!("{bbv_name}/{case}/{f} differs from SimPoint 3.2's (first at line {line})");
        }
    }
}

#[test]
fn every_golden_case_is_listed() {
    let root = data_dir().join("simpoint-golden");
    let mut found = Vec::new();
    for b in files_in(&root) {
        let p = root.join(&b);
        if !p.is_dir() {
            continue;
        }
        for c in files_in(&p) {
            if p.join(&c).is_dir() {
                found.push((b.clone(), c));
            }
        }
    }
    let listed: Vec<(String, String)> = CASES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(found, listed, "update CASES to cover every golden case");
}

macro_rules! golden {
    ($($name:ident => $bbv:literal, $case:literal;)*) => {
        $(#[test] fn $name() { check_case($bbv, $case); })*
    };
}

golden! {
    bzip2_dim30_k6_bic07 => "bzip2_9", "dim30-k6-bic07";
    bzip2_ff_dim10_cov90 => "bzip2_9", "ff-dim10-cov90";
    bzip2_fixed_k10 => "bzip2_9", "fixed-k10";
    bzip2_iters5_k20 => "bzip2_9", "iters5-k20";
    bzip2_sample3000 => "bzip2_9", "sample3000";
    bzip2_saveall_k4to8 => "bzip2_9", "saveall-k4to8";
    bzip2_search_maxk30 => "bzip2_9", "search-maxK30";
    bzip2_seeds10_custom => "bzip2_9", "seeds10-custom";
    bzip2_varlen_maxk20 => "bzip2_9", "varlen-maxK20";
    small_noproject_k5 => "bzip2_9_small", "noproject-k5";
    small_proj_files_k7 => "bzip2_9_small", "proj-files-k7";
    gzip_ff_dim10_cov90 => "gzip_9", "ff-dim10-cov90";
    gzip_fixed_k10 => "gzip_9", "fixed-k10";
    gzip_search_maxk30 => "gzip_9", "search-maxK30";
    gzip_varlen_maxk20 => "gzip_9", "varlen-maxK20";
    gzip_varlen_fixed_maxk20 => "gzip_9_varlen", "fixed-maxK20";
    gzip_varlen_varlen_ff_k12 => "gzip_9_varlen", "varlen-ff-k12";
    gzip_varlen_varlen_maxk20 => "gzip_9_varlen", "varlen-maxK20";
}
