//! bbv's records against ChampSim's own classification: every instruction of real programs'
//! code (gzip, xz, sqlite3, python3 for x86-64; Debian's cross C and maths libraries for
//! AArch64 and RISC-V 64), decoded and written as records, then read back by
//! champsim-branches (scripts/champsim builds it against the pinned ChampSim source), which
//! passes each record through the simulator's constructor. The counts per branch kind, and of
//! loads and stores, must be equal; and each instruction's kind must be the one its control
//! flow asks for.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use bbv_champsim::{BranchKind, Decoder, Isa};
use object::{Object, ObjectSection};

/// The folder of champsim and champsim-branches, built (or found) by the project's script.
fn champsim_bin() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/champsim");
    let out = Command::new(script)
        .output()
        .expect("scripts/champsim runs");
    assert!(
        out.status.success(),
        "scripts/champsim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Every instruction of `path`'s .text as records (a linear sweep; bytes that decode to no
/// instruction are stepped over), taken alternately, with made-up non-zero addresses; and the
/// counts bbv expects per kind, loads and stores.
fn records_of(
    isa: Isa,
    path: &Path,
    out: &mut impl Write,
) -> (BTreeMap<String, u64>, u64, u64, u64) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let (code, base) = (text.data().unwrap(), text.address());
    let mut d = Decoder::new(isa);
    // Where bytes decode to nothing, the next possible start of an instruction.
    let step = match isa {
        Isa::X86_64 => 1,
        Isa::Aarch64 => 4,
        Isa::Riscv64 => 2,
    };
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let (mut n, mut loads, mut stores) = (0u64, 0u64, 0u64);
    let mut at = 0;
    while at < code.len() {
        let ip = base + at as u64;
        let Some(o) = d.decode(&code[at..], ip) else {
            at += step;
            continue;
        };
        assert_eq!(
            Some(o.kind),
            d.intended(&code[at..], ip),
            "{}: {ip:#x}: {o:?}",
            path.display()
        );
        let l: Vec<u64> = (0..o.loads.min(4)).map(|k| 0x1000 + u64::from(k)).collect();
        let s: Vec<u64> = (0..o.stores.min(2))
            .map(|k| 0x2000 + u64::from(k))
            .collect();
        let taken = n % 2 == 0;
        o.record(ip, taken, &l, &s).write(out).unwrap();
        *kinds.entry(o.kind.name().to_string()).or_default() += 1;
        n += 1;
        loads += l.len() as u64;
        stores += s.len() as u64;
        at += usize::from(o.len);
    }
    (kinds, n, loads, stores)
}

#[test]
fn champsim_classifies_every_record_as_bbv_does() {
    let bin = champsim_bin();
    let dir = tempfile::tempdir().unwrap();
    let mut per_isa: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (isa, prog) in [
        (Isa::X86_64, "/usr/bin/gzip"),
        (Isa::X86_64, "/usr/bin/xz"),
        (Isa::X86_64, "/usr/bin/sqlite3"),
        (Isa::X86_64, "/usr/bin/python3"),
        (Isa::Aarch64, "/usr/aarch64-linux-gnu/lib/libc.so.6"),
        (Isa::Aarch64, "/usr/aarch64-linux-gnu/lib/libm.so.6"),
        (Isa::Riscv64, "/usr/riscv64-linux-gnu/lib/libc.so.6"),
        (Isa::Riscv64, "/usr/riscv64-linux-gnu/lib/libm.so.6"),
    ] {
        let real = std::fs::canonicalize(prog).unwrap();
        let trace = dir.path().join("t.champsim");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&trace).unwrap());
        let (kinds, n, loads, stores) = records_of(isa, &real, &mut f);
        f.flush().unwrap();
        drop(f);
        let out = Command::new(bin.join("champsim-branches"))
            .arg(&trace)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            theirs.insert(f[0].to_string(), f[1].parse().unwrap());
        }
        for k in BranchKind::ALL {
            assert_eq!(
                kinds.get(k.name()).copied().unwrap_or(0),
                theirs[k.name()],
                "{prog}: {} records",
                k.name()
            );
        }
        assert_eq!(theirs["RECORDS"], n, "{prog}");
        assert_eq!(
            (theirs["LOADS"], theirs["STORES"]),
            (loads, stores),
            "{prog}"
        );
        let all = per_isa.entry(format!("{isa:?}")).or_default();
        for (k, n) in &kinds {
            *all.entry(k.clone()).or_default() += n;
        }
        assert_eq!(kinds.get("BRANCH_OTHER"), None, "{prog}");
        eprintln!("{prog}: {n} instructions: {kinds:?}");
    }
    // Each ISA's real code has every kind but the catch-all.
    for (isa, kinds) in per_isa {
        for k in &BranchKind::ALL[..6] {
            assert!(
                kinds.get(k.name()).copied().unwrap_or(0) > 0,
                "{isa}: no {}",
                k.name()
            );
        }
    }
}
