//! Drawing primitives shared by the report's sections: colours, PNG data URIs, escaping and
//! curve thinning.

use std::fmt::Write as _;

use base64::Engine as _;

/// Cluster `c`'s colour: hues a golden angle apart, so neighbours in number differ in hue
/// however many clusters there are.
pub fn cluster_rgb(c: usize) -> [u8; 3] {
    let h = (c as f64 * 137.507_764) % 360.0;
    hsl(h, 0.62, 0.5)
}

/// Cluster `c`'s colour for CSS/SVG.
pub fn cluster_css(c: usize) -> String {
    let [r, g, b] = cluster_rgb(c);
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn hsl(h: f64, s: f64, l: f64) -> [u8; 3] {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    [r, g, b].map(|v| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8)
}

/// An 8-bit RGB PNG.
pub fn png_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width.max(1), height.max(1));
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Balanced);
        // Writing into a Vec cannot fail, and the size matches by construction.
        if let Ok(mut w) = enc.write_header() {
            let _ = w.write_image_data(rgb);
        }
    }
    out
}

/// `data:image/png;base64,...`.
pub fn data_uri(png: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

/// Text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number with about 4 significant digits, no exponent for everyday magnitudes.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else if a >= 1e-4 {
        format!("{x:.5}")
    } else {
        format!("{x:.2e}")
    }
}

/// A signed percentage.
pub fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.2}%", 100.0 * x)
    } else {
        "n/a".into()
    }
}

/// SVG path data of `values` over `width` x `height` (y from `lo` at the bottom to `hi` at
/// the top). More values than pixels are thinned to each column's minimum and maximum, so
/// that spikes stay visible and the path stays at most two points per pixel.
pub fn curve_path(values: &[f64], width: f64, height: f64, lo: f64, hi: f64) -> String {
    let n = values.len();
    let mut d = String::new();
    if n == 0 {
        return d;
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let y = |v: f64| height - (v - lo) / span * height;
    let columns = width.max(1.0) as usize;
    let mut point = |x: f64, v: f64| {
        let cmd = if d.is_empty() { 'M' } else { 'L' };
        let _ = write!(d, "{cmd}{x:.1} {:.1}", y(v));
    };
    if n <= columns {
        for (i, &v) in values.iter().enumerate() {
            point((i as f64 + 0.5) / n as f64 * width, v);
        }
    } else {
        for c in 0..columns {
            let (a, b) = (
                c * n / columns,
                ((c + 1) * n / columns).max(c * n / columns + 1),
            );
            let slice = &values[a..b.min(n)];
            let lo = slice.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = slice.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let x = (c as f64 + 0.5) / columns as f64 * width;
            point(x, lo);
            if hi > lo {
                point(x, hi);
            }
        }
    }
    d
}

/// A paragraph saying why a section has nothing (or what it shows).
pub fn note(p: &mut String, text: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(p, "<p class=\"note\">{}</p>", esc(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn thinning_keeps_spikes_and_bounds_the_points() {
        let mut v = vec![1.0; 10_000];
        v[5_000] = 50.0;
        let d = curve_path(&v, 100.0, 10.0, 0.0, 50.0);
        assert!(d.matches('L').count() < 200);
        assert!(d.contains(" 0.0"), "the spike reaches the top: {d}");
    }

    #[test]
    fn cluster_colours_differ_between_neighbours() {
        for c in 0..50 {
            assert_ne!(cluster_rgb(c), cluster_rgb(c + 1));
        }
        assert_eq!(cluster_css(0).len(), 7);
    }
}
