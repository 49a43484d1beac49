//! C `printf("%.*g")` formatting, which SimPoint's output files use (C++ streams' default
//! formatting is `%g` with precision 6; SimPoint's dataset files use precision 20).

use std::fmt::Write;

/// Appends `x` formatted as C's `%.{precision}g` to `out`.
pub fn push_g(out: &mut String, x: f64, precision: usize) {
    let p = precision.max(1);
    if x.is_nan() {
        out.push_str(if x.is_sign_negative() { "-nan" } else { "nan" });
        return;
    }
    if x.is_infinite() {
        out.push_str(if x < 0.0 { "-inf" } else { "inf" });
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0" } else { "0" });
        return;
    }
    // Scientific form with p significant digits gives the decimal exponent after rounding, and
    // the digits of either form: `%.{p-1-X}f` rounds at the same digit as `%.{p-1}e`.
    let start = out.len();
    let _ = write!(out, "{:.*e}", p - 1, x);
    let at_e = start + out[start..].rfind('e').expect("exponent in {:e} output");
    let exp: i32 = out[at_e + 1..].parse().expect("numeric exponent");
    out.truncate(at_e);
    if exp < -4 || exp >= p as i32 {
        trim_zeros_at(out, start);
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", exp.unsigned_abs());
        return;
    }
    // Move the point of `[-]d.ddd` to its fixed place: `exp` digits right, or left behind zeros.
    let digits_at = start + usize::from(x < 0.0);
    let point = digits_at + 1;
    if exp >= 0 {
        let e = exp as usize;
        if point < out.len() {
            out.remove(point);
            if point + e < out.len() {
                out.insert(point + e, '.');
            }
        }
    } else {
        if point < out.len() {
            out.remove(point);
        }
        out.insert_str(digits_at, "0.");
        for _ in 1..(-exp) {
            out.insert(digits_at + 2, '0');
        }
    }
    trim_zeros_at(out, start);
}

/// Drops trailing zeros after a decimal point in `out[start..]`, and the point if nothing follows.
fn trim_zeros_at(out: &mut String, start: usize) {
    if out[start..].contains('.') {
        let kept = out.trim_end_matches('0').trim_end_matches('.').len();
        out.truncate(kept);
    }
}

/// Formats `x` as C's `%g` (precision 6).
pub fn g(x: f64) -> String {
    let mut s = String::new();
    push_g(&mut s, x, 6);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g20(x: f64) -> String {
        let mut s = String::new();
        push_g(&mut s, x, 20);
        s
    }

    /// The two-format definition: `%.{p-1}e` for the exponent, then the form C picks.
    fn reference(x: f64, p: usize) -> String {
        let sci = format!("{:.*e}", p - 1, x);
        let (mantissa, exp) = sci.split_once('e').unwrap();
        let exp: i32 = exp.parse().unwrap();
        let trim = |s: &str| -> String {
            if s.contains('.') {
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                s.to_string()
            }
        };
        if exp < -4 || exp >= p as i32 {
            format!(
                "{}e{}{:02}",
                trim(mantissa),
                if exp < 0 { '-' } else { '+' },
                exp.unsigned_abs()
            )
        } else {
            trim(&format!("{:.*}", (p as i32 - 1 - exp) as usize, x))
        }
    }

    #[test]
    fn one_format_equals_the_two_format_definition() {
        let mut r = crate::rng::Random::new(7);
        let mut s = String::from("prefix ");
        for i in 0..200_000 {
            let m = f64::from(r.rand_float()) * 2.0 - 1.0;
            let e = (i % 41) - 20;
            let x = match i % 7 {
                // Values that round up to the next power of ten, and exact ones.
                0 => 9.9999996 * 10f64.powi(e),
                1 => f64::from(i as u32 % 1000) * 10f64.powi(e),
                _ => m * 10f64.powi(e),
            };
            for p in [1, 6, 20] {
                s.truncate(7);
                push_g(&mut s, x, p);
                assert_eq!(&s[7..], reference(x, p), "x {x:e} p {p}");
            }
        }
    }

    #[test]
    fn matches_printf() {
        assert_eq!(g(1.0 / 15.0), "0.0666667");
        assert_eq!(g(1e-5), "1e-05");
        assert_eq!(g(0.320938), "0.320938");
        assert_eq!(g(100000.0), "100000");
        assert_eq!(g(1000000.0), "1e+06");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(0.00001234567), "1.23457e-05");
        assert_eq!(g(1.0), "1");
        assert_eq!(g(-2.5), "-2.5");
        assert_eq!(g(999999.5), "1e+06");
        assert_eq!(g20(1.0 / 2860.0), "0.00034965034965034965005");
        assert_eq!(g20(0.025), "0.025000000000000001388");
        assert_eq!(
            g20("2.4008667128833510458e-05".parse().unwrap()),
            "2.4008667128833510458e-05"
        );
    }
}
