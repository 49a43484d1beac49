//! The page: seven sections drawn from a [`Report`], as one self-contained HTML file.

use std::fmt::Write as _;

use crate::draw::{cluster_css, cluster_rgb, curve_path, data_uri, esc, note, num, pct, png_rgb};
use crate::{Curve, KScore, Report};

/// Width of the timeline and its curves, in CSS pixels.
const WIDTH: f64 = 960.0;

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#666;font-style:italic}.swatch{display:inline-block;width:10px;height:10px;margin-right:4px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg image{image-rendering:pixelated}
#hover{min-height:1.4em;color:#444}
";

/// The whole page.
pub fn html(r: &Report) -> String {
    let mut p = String::with_capacity(64 * 1024);
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(&r.title),
        esc(&r.title)
    );
    summary(&mut p, r);
    timeline(&mut p, r);
    matrix(&mut p, r);
    weights(&mut p, r);
    errors(&mut p, r);
    bic(&mut p, r);
    crate::sim::section(&mut p, r);
    // The time from navigation to the load event, readable from the DOM (the browser test and
    // `bbv bench report` report it).
    p.push_str("<script>addEventListener('load',function(){document.body.dataset.loadMs=Math.round(performance.now());});</script>\n</body></html>\n");
    p
}

/// `interval` -> `intervals`, `launch` -> `launches`.
fn plural(unit: &str) -> String {
    if unit.ends_with(['s', 'h']) {
        format!("{unit}es")
    } else {
        format!("{unit}s")
    }
}

fn summary(p: &mut String, r: &Report) {
    p.push_str("<section id=\"summary\"><h2>Summary</h2><table>\n");
    for (k, v) in &r.facts {
        let _ = writeln!(p, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    p.push_str("</table>\n");
    if !r.points.is_empty() {
        let _ = writeln!(
            p,
            "<h3>Points</h3><table><tr><th>cluster</th><th class=\"n\">{}</th><th class=\"n\">weight</th><th></th></tr>",
            esc(&r.unit)
        );
        for pt in &r.points {
            let _ = writeln!(
                p,
                "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.4}</td><td>{}</td></tr>",
                cluster_css(pt.cluster),
                pt.cluster,
                pt.unit,
                pt.weight,
                esc(&pt.detail)
            );
        }
        p.push_str("</table>\n");
    }
    p.push_str("</section>\n");
}

fn timeline(p: &mut String, r: &Report) {
    let n = r.labels.len();
    let _ = writeln!(
        p,
        "<section id=\"timeline\"><h2>Phases over time</h2><p>Each column is one {} in time order, coloured by its cluster; \u{25b2} marks the chosen points. Under it each metric's value per {}, the whole run's value (solid) and the points' estimate (dashed).</p>",
        esc(&r.unit),
        esc(&r.unit)
    );
    if n == 0 {
        note(p, "Nothing was clustered.");
        p.push_str("</section>\n");
        return;
    }
    let rgb: Vec<u8> = r.labels.iter().flat_map(|&l| cluster_rgb(l)).collect();
    let strip = data_uri(&png_rgb(n as u32, 1, &rgb));
    let x = |unit: f64| unit / n as f64 * WIDTH;
    let _ = write!(
        p,
        "<svg id=\"strip\" width=\"{WIDTH}\" height=\"62\" viewBox=\"0 0 {WIDTH} 62\"><image x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"30\" preserveAspectRatio=\"none\" href=\"{strip}\"/>"
    );
    for pt in &r.points {
        let cx = x(pt.unit as f64 + 0.5);
        let _ = write!(
            p,
            "<path d=\"M{:.1} 32l-5 9h10z\" fill=\"{}\" stroke=\"#222\" stroke-width=\"0.6\"><title>cluster {}, {} {}, weight {:.4}</title></path>",
            cx,
            cluster_css(pt.cluster),
            pt.cluster,
            esc(&r.unit),
            pt.unit,
            pt.weight
        );
    }
    for t in 0..=4 {
        let u = (n * t / 4).min(n);
        let anchor = match t {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            p,
            "<text x=\"{:.1}\" y=\"58\" text-anchor=\"{anchor}\">{u}</text>",
            x(u as f64)
        );
    }
    p.push_str("</svg>\n<div id=\"hover\"></div>\n");
    hover_script(p, r);
    if r.curves.is_empty() {
        note(p, &r.curves_note);
    }
    for c in &r.curves {
        curve(p, c);
    }
    p.push_str("</section>\n");
}

/// Names the unit and cluster under the pointer; the labels travel as one JSON array.
fn hover_script(p: &mut String, r: &Report) {
    let labels: Vec<String> = r.labels.iter().map(|l| l.to_string()).collect();
    let _ = writeln!(
        p,
        "<script>(function(){{var L=[{}],s=document.getElementById('strip'),h=document.getElementById('hover');s.addEventListener('mousemove',function(e){{var b=s.getBoundingClientRect(),i=Math.floor((e.clientX-b.left)/b.width*L.length);if(i>=0&&i<L.length)h.textContent='{} '+i+': cluster '+L[i];}});}})();</script>",
        labels.join(","),
        esc(&r.unit)
    );
}

fn curve(p: &mut String, c: &Curve) {
    const H: f64 = 56.0;
    let mut lo = c.values.iter().copied().fold(c.full, f64::min);
    let mut hi = c.values.iter().copied().fold(c.full, f64::max);
    if let Some(e) = c.estimate {
        lo = lo.min(e);
        hi = hi.max(e);
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let y = |v: f64| 14.0 + H - (v - lo) / span * H;
    let est = c
        .estimate
        .map(|e| format!(", estimate {}", num(e)))
        .unwrap_or_default();
    let _ = write!(
        p,
        "<svg class=\"curve\" width=\"{WIDTH}\" height=\"{}\" viewBox=\"0 0 {WIDTH} {}\"><text x=\"0\" y=\"10\">{} ({}): full run {}{est}; range {} to {}</text><g transform=\"translate(0,14)\"><path d=\"{}\" fill=\"none\" stroke=\"#555\" stroke-width=\"1\"/></g>",
        H + 18.0,
        H + 18.0,
        esc(&c.name),
        esc(&c.unit),
        num(c.full),
        num(lo),
        num(hi),
        curve_path(&c.values, WIDTH, H, lo, hi)
    );
    let _ = write!(
        p,
        "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1565c0\" stroke-width=\"1.2\"/>",
        y(c.full),
        y(c.full)
    );
    if let Some(e) = c.estimate {
        let _ = write!(
            p,
            "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#c62828\" stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>",
            y(e),
            y(e)
        );
    }
    p.push_str("</svg>\n");
}

fn matrix(p: &mut String, r: &Report) {
    let _ = writeln!(
        p,
        "<section id=\"matrix\"><h2>Similarity of the {}' code</h2>",
        esc(&plural(&r.unit))
    );
    let Some(m) = &r.matrix else {
        note(p, &r.matrix_note);
        p.push_str("</section>\n");
        return;
    };
    let _ = writeln!(
        p,
        "<p>{0} ordered by cluster, then by time ({1} x {1} cells{2}); a cell is the similarity of two {0}' normalised basic-block vectors, 1 - half their L1 distance (1: the same code in the same proportions; 0: no block in common). Colours span the lowest similarity here, {3:.3} (dark), to 1 (bright). Lines separate clusters.</p>",
        esc(&plural(&r.unit)),
        m.bins,
        if m.bins < r.labels.len() {
            ", each the average of neighbouring units"
        } else {
            ""
        },
        m.floor()
    );
    let legend: Vec<u8> = (0..256)
        .flat_map(|i| crate::matrix::ramp(f64::from(i) / 255.0))
        .collect();
    let _ = writeln!(
        p,
        "<svg width=\"300\" height=\"28\" viewBox=\"0 0 300 28\"><image x=\"40\" y=\"2\" width=\"220\" height=\"10\" preserveAspectRatio=\"none\" href=\"{}\"/><text x=\"36\" y=\"11\" text-anchor=\"end\">{:.3}</text><text x=\"264\" y=\"11\">1</text></svg><br>",
        data_uri(&png_rgb(256, 1, &legend)),
        m.floor()
    );
    const S: f64 = 512.0;
    const O: f64 = 14.0;
    let _ = write!(
        p,
        "<svg width=\"{0}\" height=\"{0}\" viewBox=\"0 0 {0} {0}\"><image x=\"{O}\" y=\"{O}\" width=\"{S}\" height=\"{S}\" href=\"{1}\"/>",
        S + O,
        data_uri(&crate::matrix::png(m))
    );
    for &(c, a, b) in &m.spans {
        let colour = cluster_css(c);
        let (pa, w) = (O + a * S, (b - a) * S);
        let _ = write!(
            p,
            "<rect x=\"{pa:.1}\" y=\"2\" width=\"{w:.1}\" height=\"10\" fill=\"{colour}\"><title>cluster {c}</title></rect><rect x=\"2\" y=\"{pa:.1}\" width=\"10\" height=\"{w:.1}\" fill=\"{colour}\"><title>cluster {c}</title></rect>"
        );
        if a > 0.0 {
            let _ = write!(
                p,
                "<line x1=\"{pa:.1}\" x2=\"{pa:.1}\" y1=\"{O}\" y2=\"{0}\" stroke=\"#fff\" stroke-width=\"0.7\"/><line y1=\"{pa:.1}\" y2=\"{pa:.1}\" x1=\"{O}\" x2=\"{0}\" stroke=\"#fff\" stroke-width=\"0.7\"/>",
                O + S
            );
        }
    }
    p.push_str("</svg></section>\n");
}

fn weights(p: &mut String, r: &Report) {
    p.push_str("<section id=\"weights\"><h2>Weights</h2>\n");
    if r.points.is_empty() {
        note(p, "No points were chosen.");
        p.push_str("</section>\n");
        return;
    }
    let max = r.points.iter().map(|pt| pt.weight).fold(0.0, f64::max);
    let h = 20.0 * r.points.len() as f64;
    let _ = write!(
        p,
        "<svg width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\">"
    );
    for (i, pt) in r.points.iter().enumerate() {
        let w = if max > 0.0 {
            pt.weight / max * 600.0
        } else {
            0.0
        };
        let y = 20.0 * i as f64;
        let _ = write!(
            p,
            "<text x=\"0\" y=\"{:.1}\">cluster {} ({} {})</text><rect x=\"190\" y=\"{:.1}\" width=\"{w:.1}\" height=\"14\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{:.2}%</text>",
            y + 12.0,
            pt.cluster,
            esc(&r.unit),
            pt.unit,
            y + 2.0,
            cluster_css(pt.cluster),
            196.0 + w,
            y + 12.0,
            100.0 * pt.weight
        );
    }
    p.push_str("</svg></section>\n");
}

/// Largest relative error the bars of `#errors` draw to scale.
const ERROR_SCALE_CAP: f64 = 0.25;

fn errors(p: &mut String, r: &Report) {
    p.push_str("<section id=\"errors\"><h2>Estimate errors</h2>\n");
    // Beyond this the bars of a rare event's huge relative error would flatten all others.
    note(p, &r.errors_note);
    if r.errors.is_empty() {
        p.push_str("</section>\n");
        return;
    }
    // One scale for every row: the largest error plus its band, at least 1%.
    let band_rel = |e: &crate::ErrorRow| match (e.band95, e.full) {
        (Some(b), f) if f != 0.0 => b / f.abs(),
        _ => 0.0,
    };
    let scale = r
        .errors
        .iter()
        .map(|e| e.rel_error.unwrap_or(0.0).abs() + band_rel(e))
        .filter(|x| x.is_finite())
        .fold(0.01, f64::max)
        .min(ERROR_SCALE_CAP);
    p.push_str("<table><tr><th>metric</th><th class=\"n\">full run</th><th class=\"n\">estimate</th><th class=\"n\">error</th><th class=\"n\">95% band</th><th>error and band (bar: error; whisker: band around the estimate)</th></tr>\n");
    for e in &r.errors {
        let rel = e.rel_error.unwrap_or(f64::NAN);
        let _ = write!(
            p,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>",
            esc(&e.name),
            num(e.full),
            num(e.estimate),
            pct(rel),
            e.band95.map(|b| format!("\u{b1}{}", num(b))).unwrap_or("-".into())
        );
        error_bar(p, rel, band_rel(e), scale);
        p.push_str("</td></tr>\n");
    }
    let _ = writeln!(
        p,
        "</table><p>Scale: \u{b1}{:.1}% (longer bars are cut at the edge, marked \u{25b6}).</p></section>",
        100.0 * scale
    );
}

fn error_bar(p: &mut String, rel: f64, band: f64, scale: f64) {
    const W: f64 = 300.0;
    let mid = W / 2.0;
    let at = |x: f64| (mid + x.clamp(-scale, scale) / scale * mid).clamp(0.0, W);
    let _ = write!(
        p,
        "<svg width=\"{W}\" height=\"16\" viewBox=\"0 0 {W} 16\"><line x1=\"{mid}\" x2=\"{mid}\" y1=\"0\" y2=\"16\" stroke=\"#999\"/>"
    );
    if rel.is_finite() {
        let (a, b) = (at(0.0).min(at(rel)), at(0.0).max(at(rel)));
        let colour = if rel.abs() <= 0.01 {
            "#2e7d32"
        } else {
            "#c62828"
        };
        let _ = write!(
            p,
            "<rect x=\"{a:.1}\" y=\"4\" width=\"{:.1}\" height=\"8\" fill=\"{colour}\"/><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"8\" y2=\"8\" stroke=\"#222\"/><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"3\" y2=\"13\" stroke=\"#222\"/><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"3\" y2=\"13\" stroke=\"#222\"/>",
            (b - a).max(1.0),
            at(rel - band),
            at(rel + band),
            at(rel - band),
            at(rel - band),
            at(rel + band),
            at(rel + band)
        );
        if rel.abs() + band > scale {
            let (x, anchor) = if rel < 0.0 {
                (0.0, "start")
            } else {
                (W, "end")
            };
            let arrow = if rel < 0.0 { '\u{25c0}' } else { '\u{25b6}' };
            let _ = write!(
                p,
                "<text x=\"{x}\" y=\"12\" text-anchor=\"{anchor}\" fill=\"#c62828\">{arrow}</text>"
            );
        }
    }
    p.push_str("</svg>");
}

fn bic(p: &mut String, r: &Report) {
    p.push_str("<section id=\"bic\"><h2>Choosing k</h2>\n");
    note(p, &r.bic_note);
    if r.by_k.is_empty() {
        p.push_str("</section>\n");
        return;
    }
    type Score = fn(&KScore) -> Option<f64>;
    let series: [(&str, Score, bool); 3] = [
        (
            "BIC (fraction of the range)",
            |s| Some(s.bic_fraction),
            false,
        ),
        ("worst metric error", |s| s.worst_rel_error, true),
        ("BBV error (L1, 0-2)", |s| s.bbv_error, false),
    ];
    for (title, get, percent) in series {
        let ys: Vec<(usize, f64)> = r
            .by_k
            .iter()
            .filter_map(|s| get(s).filter(|v| v.is_finite()).map(|v| (s.k, v)))
            .collect();
        if !ys.is_empty() {
            k_chart(p, title, &ys, r.chosen_k, percent);
        }
    }
    p.push_str("</section>\n");
}

/// One score against k, the chosen k marked.
fn k_chart(p: &mut String, title: &str, ys: &[(usize, f64)], chosen: Option<usize>, percent: bool) {
    const W: f64 = 316.0;
    const H: f64 = 160.0;
    const L: f64 = 60.0;
    const B: f64 = 18.0;
    let kmax = ys.iter().map(|y| y.0).max().unwrap_or(1).max(2) as f64;
    let kmin = ys.iter().map(|y| y.0).min().unwrap_or(1) as f64;
    let hi = ys.iter().map(|y| y.1).fold(0.0, f64::max).max(1e-12);
    let x = |k: f64| L + (k - kmin) / (kmax - kmin).max(1.0) * (W - L - 8.0);
    let y = |v: f64| 26.0 + (1.0 - v / hi) * (H - B - 26.0);
    let label = |v: f64| if percent { pct(v) } else { num(v) };
    let _ = write!(
        p,
        "<svg class=\"kchart\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\"><text x=\"0\" y=\"10\">{}</text><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">0</text><text x=\"{L}\" y=\"{H}\" text-anchor=\"middle\">k={}</text><text x=\"{}\" y=\"{H}\" text-anchor=\"middle\">{}</text>",
        esc(title),
        L - 4.0,
        y(hi) + 4.0,
        label(hi),
        L - 4.0,
        y(0.0),
        kmin,
        x(kmax),
        kmax
    );
    if let Some(k) = chosen {
        let _ = write!(
            p,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"22\" y2=\"{1}\" stroke=\"#c62828\" stroke-dasharray=\"3 3\"><title>chosen k = {k}</title></line>",
            x(k as f64),
            H - B
        );
    }
    let d: Vec<String> = ys
        .iter()
        .map(|&(k, v)| format!("{:.1} {:.1}", x(k as f64), y(v)))
        .collect();
    let _ = write!(
        p,
        "<path d=\"M{}\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"1.5\"/>",
        d.join("L")
    );
    for &(k, v) in ys {
        let _ = write!(
            p,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#1565c0\"><title>k = {k}: {}</title></circle>",
            x(k as f64),
            y(v),
            label(v)
        );
    }
    p.push_str("</svg>\n");
}
