//! Another tool's output read within bounds: a simulator that prints without end (a broken
//! build, a stand-in printing `/dev/zero`) must not make bbv allocate without end, and one
//! whose error output fills its pipe must not block.

use std::io::{BufRead, BufReader, Read};
use std::process::Child;

/// What a child printed, within the bounds it was read with.
#[derive(Debug, Default)]
pub struct Output {
    /// The lines of standard output the caller kept (lossily UTF-8).
    pub stdout: String,
    /// The first bytes of standard error, up to its bound.
    pub stderr: String,
    /// Standard output reached its bound, or held a line longer than [`MAX_LINE`]: the child
    /// printed more than any real report holds (the rest was not read; the caller kills the
    /// child).
    pub overflowed: bool,
}

/// The longest line a tool's report may hold: reading stops at a longer one.
pub const MAX_LINE: u64 = 1 << 20;

/// Reads `child`'s piped standard output, each line to `line` as it arrives (kept in
/// [`Output::stdout`] where it returns true), and standard error (the first `max_err` bytes
/// kept, the rest drained so that the child never blocks on it), until standard output ends,
/// `max_out` bytes of it were read or a line is longer than [`MAX_LINE`]. The child is not
/// waited for.
pub fn read_bounded(
    child: &mut Child,
    max_out: u64,
    max_err: u64,
    line: &mut dyn FnMut(&str) -> bool,
) -> Output {
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    std::thread::scope(|scope| {
        let err = scope.spawn(move || {
            let mut text = Vec::new();
            if let Some(e) = stderr {
                let mut e = BufReader::new(e);
                let _ = (&mut e).take(max_err).read_to_end(&mut text);
                let _ = std::io::copy(&mut e, &mut std::io::sink());
            }
            String::from_utf8_lossy(&text).into_owned()
        });
        let mut text = String::new();
        let mut read = 0u64;
        let mut long = false;
        if let Some(out) = stdout {
            let mut out = BufReader::new(out.take(max_out));
            let mut buf = Vec::new();
            while matches!((&mut out).take(MAX_LINE).read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                read += buf.len() as u64;
                if buf.len() as u64 == MAX_LINE && buf.last() != Some(&b'\n') {
                    long = true;
                    break;
                }
                let l = String::from_utf8_lossy(&buf);
                if line(&l) {
                    text.push_str(&l);
                }
                buf.clear();
            }
        }
        Output {
            stdout: text,
            stderr: err.join().unwrap_or_default(),
            overflowed: long || read >= max_out,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn spawn(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn lines_arrive_in_order_and_errors_are_kept() {
        let mut c = spawn("echo a; echo b >&2; printf c");
        let mut seen = Vec::new();
        let o = read_bounded(&mut c, 1 << 20, 1 << 20, &mut |l| {
            seen.push(l.to_string());
            l != "a\n"
        });
        assert!(c.wait().unwrap().success());
        assert_eq!(seen, ["a\n", "c"]);
        assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("c", "b\n"));
        assert!(!o.overflowed);
    }

    /// Endless output stops at the bound, an endless line at its first megabyte; endless
    /// error output is drained, not kept.
    #[test]
    fn endless_output_is_bounded() {
        for (script, kept) in [
            ("head -c 3000000 /dev/zero >&2; exec yes", 4 << 20),
            ("head -c 3000000 /dev/zero >&2; exec cat /dev/zero", 0),
        ] {
            let mut c = spawn(script);
            let o = read_bounded(&mut c, 4 << 20, 1 << 10, &mut |_| true);
            let _ = c.kill();
            let _ = c.wait();
            assert!(o.overflowed, "{script}");
            assert_eq!(o.stdout.len(), kept, "{script}");
            assert_eq!(o.stderr.len(), 1 << 10, "{script}");
        }
    }
}
