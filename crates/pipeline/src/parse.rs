//! The option values every command parses alike, as clap's value parsers take them (an error
//! is the message bbv prints with exit status 2).

/// `yes`, `on`, `true` or `no`, `off`, `false`.
pub fn yes_no(v: &str) -> Result<bool, String> {
    match v {
        "yes" | "on" | "true" => Ok(true),
        "no" | "off" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, not {v:?}")),
    }
}

use crate::options::MAX_INSTRUCTIONS;

/// A positive whole number of instructions (`_` separators allowed; the jobs check the
/// largest, [`MAX_INSTRUCTIONS`], naming the option).
pub fn positive(v: &str) -> Result<u64, String> {
    match v.replace('_', "").parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "expected a positive whole number of instructions, not {v:?}"
        )),
    }
}

/// A whole number of records or seconds, 0 included, at most [`MAX_INSTRUCTIONS`] (2^62),
/// for the options no job checks further (`--tail`, `--warmup-detail`, `--cpu-seconds`).
pub fn count(v: &str) -> Result<u64, String> {
    match v.replace('_', "").parse::<u64>() {
        Ok(n) if n <= MAX_INSTRUCTIONS => Ok(n),
        _ => Err(format!("expected a whole number up to 2^62, not {v:?}")),
    }
}

/// A percentage above 0 and at most 100 (a trailing `%` allowed), as a fraction.
pub fn percent(v: &str) -> Result<f64, String> {
    match v.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p / 100.0),
        _ => Err(format!(
            "expected a percentage above 0 and at most 100, not {v:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_refusals() {
        assert_eq!(yes_no("on"), Ok(true));
        assert_eq!(yes_no("false"), Ok(false));
        assert!(yes_no("maybe").is_err());
        assert_eq!(positive("10_000_000"), Ok(10_000_000));
        assert!(positive("0").is_err() && positive("-5").is_err() && positive("1e6").is_err());
        assert_eq!(count("4611686018427387904"), Ok(MAX_INSTRUCTIONS));
        assert!(count("4611686018427387905").is_err());
        assert_eq!(count("0"), Ok(0));
        assert!(count("18446744073709551615").is_err() && count("-1").is_err());
        assert_eq!(percent("3%"), Ok(0.03));
        assert_eq!(percent("100"), Ok(1.0));
        for bad in ["0", "-1", "100.5", "NaN", "inf", "three"] {
            assert!(percent(bad).is_err(), "{bad}");
        }
    }
}
