//! `bbv simulate`'s 95% band, recomputed here from the run directory's own files (metrics.csv,
//! simpoint.labels, summary.json, simulation.json's regions) as docs/champsim.md derives it,
//! and the band's bad inputs: a run without per-interval metrics, a --max-band out of range.

use std::path::Path;
use std::process::Stdio;

use crate::common::{bbv, guest_env};
use crate::trace_cli::json;

/// The first-order model of docs/run.md (`--pick strata`): 0.5 + (10 L1D misses + 70 L2 misses
/// + 16 mispredictions) / instructions.
fn model(row: &[u64]) -> f64 {
    let (n, l1d, l2, mis) = (row[1], row[6], row[7], row[8]);
    if n == 0 {
        return 0.5;
    }
    0.5 + (10.0 * l1d as f64 + 70.0 * l2 as f64 + 16.0 * mis as f64) / n as f64
}

/// The band's half-width in percent, from the files alone.
fn band_from_files(run: &Path, estimate: f64) -> f64 {
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let rows: Vec<Vec<u64>> = metrics
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    let labels: Vec<usize> = std::fs::read_to_string(run.join("simpoint.labels"))
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(rows.len(), labels.len());
    let summary = json(&run.join("summary.json"));
    let sim = json(&run.join("simulation.json"));
    // Per simulated region: its point's interval, its weight (multiplier x instructions) and CPI.
    let mut pts: Vec<(usize, usize, f64, f64)> = Vec::new();
    for r in sim["regions"].as_array().unwrap() {
        let label = r["id"].as_u64().unwrap() as usize - 1;
        let p = summary["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["cluster"].as_u64() == Some(label as u64))
            .unwrap();
        let n = r["instructions"].as_f64().unwrap();
        pts.push((
            label,
            p["interval"].as_u64().unwrap() as usize,
            r["multiplier"].as_f64().unwrap() * n,
            r["cycles"].as_f64().unwrap() / n,
        ));
    }
    let tw: f64 = pts.iter().map(|p| p.2).sum();
    let e = |i: usize| model(&rows[i]);
    let k =
        pts.iter().map(|p| p.2 * p.3).sum::<f64>() / pts.iter().map(|p| p.2 * e(p.1)).sum::<f64>();
    // Every interval's place in SimPoint's projected space (15 dimensions, its default seed).
    let data = bbv_simpoint::load_projected(&run.join("bb.out")).unwrap();
    assert_eq!(data.rows(), rows.len());
    let dist = |a: usize, b: usize| -> f64 {
        let (x, y) = (data.row(a), data.row(b));
        x.iter()
            .zip(y)
            .map(|(p, q)| (p - q) * (p - q))
            .sum::<f64>()
            .sqrt()
    };
    // The misfit's growth with distance: (r_a - r_b)^2 = g d_ab through the origin.
    let r: Vec<f64> = pts.iter().map(|p| p.3 / (k * e(p.1)) - 1.0).collect();
    let (mut dy, mut dd, mut ds, mut np) = (0.0, 0.0, 0.0, 0);
    for a in 0..pts.len() {
        for b in a + 1..pts.len() {
            let d = dist(pts[a].1, pts[b].1);
            dy += d * (r[a] - r[b]).powi(2);
            dd += d * d;
            ds += d;
            np += 1;
        }
    }
    let g = if np >= 3 && dd > 0.0 {
        dy / dd
    } else {
        0.08 / (ds / f64::from(np.max(1))).max(1e-3)
    };
    let mut var = 0.0;
    for &(label, point, w, _) in &pts {
        let members: Vec<usize> = (0..rows.len()).filter(|&i| labels[i] == label).collect();
        if members.len() < 2 {
            continue;
        }
        assert!(members.len() <= 512, "the test's run is small: no sampling");
        let n = |i: usize| rows[i][1] as f64;
        let t: f64 = members.iter().map(|&i| n(i)).sum();
        let mean = members.iter().map(|&i| n(i) * e(i)).sum::<f64>() / t;
        let m = members.len() as f64;
        let to_point = members.iter().map(|&i| dist(point, i)).sum::<f64>() / m;
        let within = members
            .iter()
            .map(|&a| members.iter().map(|&b| dist(a, b)).sum::<f64>())
            .sum::<f64>()
            / (m * m);
        let spread = (g * (to_point - within / 2.0)).max(0.0);
        let v = (k * (e(point) - mean)).powi(2) + (k * mean).powi(2) * spread;
        var += (w / tw).powi(2) * v;
    }
    let covered: f64 = rows.iter().map(|r| r[1] as f64).sum();
    let whole = summary["threads"][0]["instructions"].as_f64().unwrap();
    let tail = (1.0 - covered / whole).max(0.0);
    var += (tail * estimate).powi(2);
    100.0 * 1.959964 * var.sqrt() / estimate
}

/// Checks `simulation.json`'s band against the files, and that `bbv simulate` printed it
/// first (`stderr`).
pub(crate) fn band_recomputed(run: &Path, stderr: &str) {
    let sim = json(&run.join("simulation.json"));
    let estimate = sim["estimate_cpi"].as_f64().unwrap();
    let band = sim["band_pct"]
        .as_f64()
        .expect("a run with metrics has a band");
    let ours = band_from_files(run, estimate);
    assert!(
        (band - ours).abs() < 1e-9 * ours.max(1.0),
        "band {band} against {ours}"
    );
    assert!(band > 0.0 && band < 100.0, "{band}");
    let b = &sim["band"];
    assert!((b["low_cpi"].as_f64().unwrap() - estimate * (1.0 - band / 100.0)).abs() < 1e-9);
    assert!(b["derivation"].as_str().unwrap().contains("stratified"));
    // The band heads the result, before the regions' table.
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("estimated CPI"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        lines[at].starts_with(&format!(
            "estimated CPI {estimate:.4} ± {band:.2}% (95% band"
        )),
        "{stderr}"
    );
    assert!(
        lines.get(at + 1).is_some_and(|l| l.starts_with("region ")),
        "{stderr}"
    );
}

/// `--max-band`: a run without metrics is refused before anything is simulated, naming
/// --validate; 0, negative or not a number is refused; a band wider than asked exits 1 with
/// the figures written. Then the plain chain without metrics (`plain_chain_checked`).
pub(crate) fn max_band_checked(run: &Path, guest: &[String]) {
    let simulate = |max: &str| {
        guest_env(&mut bbv())
            .arg("simulate")
            .arg(run)
            .args(["--jobs", "2", "--max-band", max])
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    for bad in ["0", "-1", "nan", "x"] {
        let o = simulate(bad);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("percentage above 0"), "{bad}: {err}");
    }
    let before = std::fs::read(run.join("simulation.json")).unwrap();
    // A simulation.json bbv cannot read (another version's, a broken one) is replaced, not
    // an error after the simulations.
    std::fs::write(run.join("simulation.json"), "{\"regions\": null}").unwrap();
    let o = simulate("0.000001");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("wider than --max-band"), "{err}");
    let after = json(&run.join("simulation.json"));
    assert!(after["band_pct"].as_f64().unwrap() > 0.000001);
    // The same regions simulate alike: the figures are ChampSim's, deterministic.
    assert_eq!(
        after["estimate_cpi"],
        serde_json::from_slice::<serde_json::Value>(&before).unwrap()["estimate_cpi"]
    );
    let metrics = run.join("metrics.csv");
    let aside = run.join("metrics.csv.aside");
    std::fs::rename(&metrics, &aside).unwrap();
    let o = simulate("5");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--validate") && err.contains("no error band"),
        "{err}"
    );
    assert_eq!(json(&run.join("simulation.json")), after);
    plain_chain_checked(run, guest);
    std::fs::rename(&aside, &metrics).unwrap();
}

/// The plain chain on a run without per-interval metrics: `bbv trace` warns before its replay
/// that the estimate can have no band; `bbv simulate` with no flags refuses before ChampSim
/// runs, naming what gives one; `--no-band` simulates (the result says it has none) and is
/// refused beside --max-band.
fn plain_chain_checked(run: &Path, guest: &[String]) {
    let o = guest_env(&mut bbv())
        .arg("trace")
        .arg(run)
        .arg("-o")
        .arg(run.join("traces-again"))
        .args(["--tail", "2000", "--short-warmups", "--"])
        .args(guest)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines()
            .next()
            .is_some_and(|l| l.starts_with("bbv: warning:") && l.contains("no error band")),
        "{err}"
    );
    // (DIR/trace.json now names traces-again: the same regions, traced alike.)
    let simulate = |extra: &[&str]| {
        guest_env(&mut bbv())
            .arg("simulate")
            .arg(run)
            .args(["--jobs", "2"])
            .args(extra)
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let before = std::fs::read(run.join("simulation.json")).unwrap();
    let o = simulate(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for fix in ["--target-error 3", "--full", "--no-band"] {
        assert!(err.contains(fix), "{fix}: {err}");
    }
    assert_eq!(std::fs::read(run.join("simulation.json")).unwrap(), before);
    let o = simulate(&["--no-band", "--max-band", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(run.join("simulation.json")).unwrap(), before);
    let o = simulate(&["--no-band"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines()
            .find(|l| l.starts_with("estimated CPI"))
            .is_some_and(|l| l.contains("no error band")),
        "{err}"
    );
    let sim = json(&run.join("simulation.json"));
    assert!(sim["band_pct"].is_null(), "{sim}");
    assert!(
        sim["no_band"].as_str().unwrap().contains("metrics"),
        "{sim}"
    );
}
