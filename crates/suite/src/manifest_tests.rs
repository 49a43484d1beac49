//! The manifest parser's tests.

use super::*;

fn parse_in(dir: &Path, text: &str) -> Result<Manifest, SuiteError> {
    parse(&dir.join("suite.toml"), text)
}

fn error_of(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    parse_in(dir.path(), text).unwrap_err().to_string()
}

#[test]
fn defaults_apply_and_jobs_override_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = parse_in(
        dir.path(),
        "[defaults]\ninterval = 1000000\nmax-k = 5\nenv = { A = \"1\", B = \"2\" }\ntimeout = \"2m\"\n\n\
         [[job]]\nname = \"one\"\ncommand = [\"sh\", \"-c\", \"true\"]\nmax-k = 3\nenv = { B = \"3\" }\n\
         exclude-image = [\"libgomp\", \"libfoo\"]\nvalidate = true\npick = \"metrics\"\nschedule = \"deterministic\"\n\n\
         [[job]]\nname = \"two.b_c-d\"\ncommand = [\"true\"]\ntimeout = 30\n",
    )
    .unwrap();
    assert_eq!(m.jobs.len(), 2);
    let one = &m.jobs[0];
    assert_eq!(one.line, 7);
    assert_eq!(one.timeout, Some(Duration::from_secs(120)));
    assert_eq!(one.env["A"], "1");
    assert_eq!(one.env["B"], "3");
    assert_eq!(one.cwd, std::path::absolute(dir.path()).unwrap());
    let args: Vec<String> = one
        .bbv_args(Path::new("/o/one"))
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        args.join(" "),
        "run --exclude-image libgomp --exclude-image libfoo --interval 1000000 --max-k 3 --pick metrics --schedule deterministic --validate -o /o/one -- sh -c true"
    );
    assert_eq!(m.jobs[1].timeout, Some(Duration::from_secs(30)));
    let env = m.jobs[1].environment("/root");
    assert_eq!(
        env.keys().collect::<Vec<_>>(),
        ["A", "B", "HOME", "LANG", "PATH"]
    );
}

#[test]
fn bad_manifests_name_the_line() {
    let cases = [
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nfrobnicate = 1\n", ":4: unknown key \"frobnicate\""),
        ("[[job]]\nname = \"a b\"\ncommand = [\"true\"]\n", ":2: job name \"a b\""),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n", ":5: job name \"a\" is used twice"),
        ("[[job]]\nname = \"a\"\ncommand = [\"no-such-program-here\"]\n", ":3: program \"no-such-program-here\" not found"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\ninterval = \"big\"\n", ":4: interval must be a non-negative integer"),
        ("[[job]]\nname = \"a\"\n", ":1: job \"a\" needs a command"),
        ("[[job]]\ncommand = [\"true\"]\n", ":1: a job needs a name"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\ntimeout = \"5 years\"\n", ":4: timeout"),
        ("[[job]]\nname = \"g\"\nkind = \"gpu\"\ntraces = \"none/kernelslist.g\"\n", ":4: traces"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nstdin = \"missing\"\n", ":4: stdin"),
        ("[defaults]\ncommand = [\"true\"]\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n", ":2: command belongs in a [[job]]"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"\n", ":3:"),
        ("[job]\nname = 1\n", ":1: job must be an array"),
        ("title = \"x\"\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n", ":1: unknown key \"title\""),
        ("", ":1: no [[job]]"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nsimulate = \"yes\"\n", ":4: simulate: expected true, false or \"full\""),
    ];
    for (text, want) in cases {
        let got = error_of(text);
        assert!(got.contains(want), "{text:?}: got {got:?}, want {want:?}");
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration("90"), Some(90));
    assert_eq!(parse_duration("90s"), Some(90));
    assert_eq!(parse_duration("30m"), Some(1800));
    assert_eq!(parse_duration("2h"), Some(7200));
    assert_eq!(parse_duration("0s"), None);
    assert_eq!(parse_duration("1d"), None);
    assert_eq!(parse_duration(""), None);
}

#[test]
fn simulate_adds_the_trace_and_the_simulation() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kernelslist.g"), "").unwrap();
    let m = parse_in(
        dir.path(),
        "[defaults]\nsimulate = true\n\n\
         [[job]]\nname = \"a\"\ncommand = [\"gzip\", \"-9\"]\ncpu = \"Haswell\"\n\n\
         [[job]]\nname = \"b\"\ncommand = [\"true\"]\nsimulate = \"full\"\n\n\
         [[job]]\nname = \"c\"\ncommand = [\"true\"]\nsimulate = false\n\n\
         [[job]]\nname = \"g\"\nkind = \"gpu\"\ntraces = \"kernelslist.g\"\n\n\
         [[job]]\nname = \"l\"\ncommand = [\"true\"]\nregions = \"looppoint\"\n",
    )
    .unwrap();
    let steps = |j: &Job| -> Vec<String> {
        j.steps(Path::new("/o"))
            .iter()
            .map(|s| {
                s.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    assert_eq!(
        steps(&m.jobs[0]),
        [
            "run --cpu Haswell --validate -o /o -- gzip -9",
            "trace /o --cpu Haswell -- gzip -9",
            "simulate /o --cpu Haswell"
        ]
    );
    assert_eq!(
        steps(&m.jobs[1]),
        [
            "run --validate -o /o -- true",
            "trace /o -- true",
            "simulate /o --full -- true"
        ]
    );
    // LoopPoint slices cannot be banded: metrics are not measured for a band they cannot
    // have, and the simulation is asked for without one.
    assert_eq!(
        steps(&m.jobs[4]),
        [
            "run --regions looppoint -o /o -- true",
            "trace /o -- true",
            "simulate /o --no-band"
        ]
    );
    assert_eq!(steps(&m.jobs[2]), ["run -o /o -- true"]);
    // A default meant for CPU jobs does not apply to GPU ones; said in a GPU job, it is refused.
    assert_eq!(steps(&m.jobs[3]).len(), 1);
    let e = parse_in(
        dir.path(),
        "[[job]]\nname = \"g\"\nkind = \"gpu\"\ntraces = \"kernelslist.g\"\nsimulate = true\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains(":5: simulate is for CPU jobs"), "{e}");
}
