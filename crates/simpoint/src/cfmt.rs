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
    // Scientific form with p significant digits gives the decimal exponent after rounding.
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').expect("exponent in {:e} output");
    let exp: i32 = exp.parse().expect("numeric exponent");
    if exp < -4 || exp >= p as i32 {
        out.push_str(trim_zeros(mantissa));
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", exp.unsigned_abs());
    } else {
        let decimals = (p as i32 - 1 - exp) as usize;
        let fixed = format!("{:.*}", decimals, x);
        out.push_str(trim_zeros(&fixed));
    }
}

/// Formats `x` as C's `%g` (precision 6).
pub fn g(x: f64) -> String {
    let mut s = String::new();
    push_g(&mut s, x, 6);
    s
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g20(x: f64) -> String {
        let mut s = String::new();
        push_g(&mut s, x, 20);
        s
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
