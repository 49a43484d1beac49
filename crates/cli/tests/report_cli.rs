//! The HTML report (`report.html` of `bbv run`, `bbv report DIR`, `bbv gpu sample`) loaded in
//! a real headless browser (Debian's chromium): every section is in the DOM, the page renders
//! to a screenshot that is not blank, a 10,000-interval run's page stays small; and run
//! directories that cannot give a correct page are refused without touching the old one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{assert_status, bbv, data_dir, files_in, gzip_job, json, text_input};

const SECTIONS: [&str; 7] = [
    "summary",
    "timeline",
    "matrix",
    "weights",
    "errors",
    "bic",
    "simulation",
];

/// Debian's chromium, headless, with a profile of its own (tests run in parallel).
fn chromium(profile: &Path, args: &[&str], page: &Path) -> Output {
    let exe = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is missing: scripts/setup installs it (scripts/apt-packages.txt)");
    let out = Command::new(exe)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The DOM after the load event, as chromium serialises it.
fn dom(work: &Path, page: &Path) -> String {
    let out = chromium(&work.join("profile-dom"), &["--dump-dom"], page);
    String::from_utf8(out.stdout).unwrap()
}

/// Distinct colours and the share of pixels that are not the page's white, of a screenshot.
fn screenshot(work: &Path, page: &Path) -> (usize, f64) {
    let shot = work.join("shot.png");
    chromium(
        &work.join("profile-shot"),
        &[
            "--window-size=1100,3000",
            &format!("--screenshot={}", shot.display()),
        ],
        page,
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().map(|p| &p[..3]).collect();
    let inked = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    (colours.len(), inked as f64 / pixels.len() as f64)
}

/// Checks the page a browser sees: every section, the unit count, a rendered screenshot.
fn check_page(work: &Path, page: &Path, units: usize) -> String {
    let size = std::fs::metadata(page).unwrap().len();
    assert!(size < 5 << 20, "{}: {size} bytes", page.display());
    let d = dom(work, page);
    for id in SECTIONS {
        assert!(d.contains(&format!("id=\"{id}\"")), "no #{id} in the DOM");
    }
    assert!(
        !d.contains("http://") && !d.contains("https://"),
        "the page refers to the network"
    );
    let labels = d
        .split("var L=[")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap();
    assert_eq!(labels.split(',').count(), units, "timeline columns");
    let load_ms = d
        .split("data-load-ms=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the load event ran");
    let (colours, inked) = screenshot(work, page);
    assert!(
        colours > 200 && inked > 0.05,
        "blank screenshot? {colours} colours, {:.1}% inked",
        100.0 * inked
    );
    eprintln!(
        "{}: {units} units, {size} bytes, loaded in {load_ms} ms, {colours} colours",
        page.display()
    );
    d
}

fn validated_run(work: &Path, bytes: usize, interval: &str) -> PathBuf {
    let input = work.join("input.txt");
    text_input(&input, bytes);
    let out = work.join("out");
    gzip_job(&["run", "--validate", "--interval", interval], &out, &input);
    out
}

#[test]
fn a_ten_thousand_interval_run_report_renders_in_chromium() {
    let work = tempfile::tempdir().unwrap();
    let out = validated_run(work.path(), 2_000_000, "25000");
    let summary = json(&out.join("summary.json"));
    let intervals = summary["intervals"].as_u64().unwrap() as usize;
    assert!(intervals >= 10_000, "only {intervals} intervals");
    let page = out.join("report.html");
    let d = check_page(work.path(), &page, intervals);
    // The chosen points are marked on the timeline, and the errors are validation.json's.
    let k = summary["points"].as_array().unwrap().len();
    assert_eq!(d.matches("</title></path>").count(), k);
    let v = json(&out.join("validation.json"));
    for m in v["metrics"].as_array().unwrap() {
        assert!(d.contains(&format!("<td>{}</td>", m["name"].as_str().unwrap())));
    }
    // BIC and BBV error for every k tried, the worst error where it is defined.
    let tried = v["by_k"].as_array().unwrap().len();
    let circles = d.matches("<circle").count();
    assert!(
        (2 * tried..=3 * tried).contains(&circles),
        "{circles} for {tried} k"
    );
    // `bbv report DIR` rebuilds the same page from the files.
    let before = std::fs::read(&page).unwrap();
    std::fs::remove_file(&page).unwrap();
    let rebuilt = bbv().arg("report").arg(&out).output().unwrap();
    assert_status(&rebuilt, 0);
    assert_eq!(std::fs::read(&page).unwrap(), before);
}

#[test]
fn report_refuses_incomplete_or_inconsistent_run_dirs() {
    let work = tempfile::tempdir().unwrap();
    let out = validated_run(work.path(), 300_000, "1000000");
    let page = out.join("report.html");
    let good = std::fs::read(&page).unwrap();
    let refused = |what: &str, expect: &str| {
        let r = bbv().arg("report").arg(&out).output().unwrap();
        assert_status(&r, 2);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(expect), "{what}: {err}");
        assert_eq!(
            std::fs::read(&page).unwrap(),
            good,
            "{what}: report.html changed"
        );
        assert!(
            !files_in(&out).iter().any(|f| f.contains("bbv-tmp")),
            "{what}: a temporary file was left"
        );
    };
    // Metrics of another number of intervals than the vectors.
    let metrics = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    let shorter: Vec<&str> = metrics.lines().collect();
    let n = shorter.len() - 2;
    std::fs::write(out.join("metrics.csv"), shorter[..=n].join("\n") + "\n").unwrap();
    refused(
        "short metrics.csv",
        &format!(
            "metrics.csv: {n} intervals, but the run clustered {}",
            n + 1
        ),
    );
    std::fs::write(out.join("metrics.csv"), &metrics).unwrap();
    // Missing files.
    for f in ["simpoint.labels", "bb.out", "summary.json"] {
        let path = out.join(f);
        let keep = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        refused(
            &format!("no {f}"),
            if f == "summary.json" {
                "summary.json: missing"
            } else {
                f
            },
        );
        std::fs::write(&path, keep).unwrap();
    }
    // Not a directory at all.
    let r = bbv()
        .arg("report")
        .arg(work.path().join("nowhere"))
        .output()
        .unwrap();
    assert_status(&r, 2);
    // Intact again: rebuilt as before.
    assert_status(&bbv().arg("report").arg(&out).output().unwrap(), 0);
    assert_eq!(std::fs::read(&page).unwrap(), good);
}

#[test]
fn gpu_sample_report_renders_in_chromium() {
    let work = tempfile::tempdir().unwrap();
    // Six launches of two real kernels, alternating.
    let acc = data_dir().join("accelsim");
    let kernels = [
        acc.join("matrixmul-32-32-trace-aba4ea32/kernel-1.traceg"),
        acc.join("vectoradd-100-32-trace-0c94f481/kernel-1.traceg"),
    ];
    let list = work.path().join("kernelslist.g");
    // Accel-Sim's names: files beside the list starting with `kernel` (links here).
    let text: String = (0..6)
        .map(|i| {
            let name = format!("kernel-{}.traceg", i + 1);
            std::os::unix::fs::symlink(&kernels[i % 2], work.path().join(&name)).unwrap();
            name + "\n"
        })
        .collect();
    std::fs::write(&list, text).unwrap();
    let out = work.path().join("sample");
    let r = bbv()
        .args(["gpu", "sample"])
        .arg(&list)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_status(&r, 0);
    let d = check_page(work.path(), &out.join("report.html"), 6);
    assert!(d.contains("warp instructions"));
}
