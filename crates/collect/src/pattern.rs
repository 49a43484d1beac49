//! exp-bbv's file-name patterns: `%p` (process id), `%q{VAR}` (environment variable), `%%`.

use crate::CollectError;

/// Expands `pattern`; `pid` is None while only checking the syntax (before the guest runs).
pub fn expand(pattern: &str, pid: Option<u32>) -> Result<String, CollectError> {
    let bad = |why: &str| CollectError::BadPattern {
        pattern: pattern.into(),
        why: why.into(),
    };
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => {
                if let Some(pid) = pid {
                    out.push_str(&pid.to_string());
                }
            }
            Some('%') => out.push('%'),
            Some('q') => {
                if chars.next() != Some('{') {
                    return Err(bad("%q must be followed by {VARIABLE}"));
                }
                let rest = chars.as_str();
                let Some(end) = rest.find('}') else {
                    return Err(bad("%q{ is missing its closing }"));
                };
                let var = &rest[..end];
                if var.is_empty() {
                    return Err(bad("%q{} names no variable"));
                }
                match std::env::var(var) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => return Err(bad(&format!("environment variable {var} is not set"))),
                }
                chars = rest[end + 1..].chars();
            }
            Some(other) => {
                return Err(bad(&format!(
                    "unknown format %{other} (use %p, %q{{VAR}} or %%)"
                )))
            }
            None => return Err(bad("ends with a lone %")),
        }
    }
    if out.is_empty() && pid.is_some() {
        return Err(bad("expands to an empty name"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_pid_env_and_percent() {
        std::env::set_var("BBV_PATTERN_TEST", "xy");
        assert_eq!(expand("bb.out.%p", Some(42)).unwrap(), "bb.out.42");
        assert_eq!(
            expand("a.%q{BBV_PATTERN_TEST}.%%", Some(1)).unwrap(),
            "a.xy.%"
        );
        assert!(expand("a%", Some(1)).is_err());
        assert!(expand("a%x", Some(1)).is_err());
        assert!(expand("%q{NO_SUCH_VARIABLE_HOPEFULLY}", Some(1)).is_err());
        assert!(expand("%qX", Some(1)).is_err());
        assert!(expand("%q{A", Some(1)).is_err());
    }
}
