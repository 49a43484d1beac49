//! Integration tests: real traces, every format variant, hostile input.

use std::io::Write;
use std::path::{Path, PathBuf};

use accelsim_trace::{AddressMode, Event, KernelList, TraceReader};
use proptest::prelude::*;

fn data() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/accelsim");
    assert!(d.is_dir(), "{} is missing", d.display());
    d
}

/// (instruction lines, lines with mask != 0, sum of active lanes, distinct PCs)
fn tally(path: &Path) -> Result<(u64, u64, u64, usize), accelsim_trace::TraceError> {
    let mut r = TraceReader::open(path)?;
    let (mut w, mut on, mut t) = (0, 0, 0);
    let mut pcs = std::collections::BTreeSet::new();
    while let Some(e) = r.next_event()? {
        if let Event::Inst(i) = e {
            w += 1;
            on += u64::from(i.mask != 0);
            t += u64::from(i.mask.count_ones());
            pcs.insert(i.pc);
        }
    }
    Ok((w, on, t, pcs.len()))
}

#[test]
fn real_traces_give_the_reference_counts() {
    for (dir, want) in [
        ("vectoradd-100-32-trace-0c94f481", (344, 341, 10516, 23)),
        ("vectoradd-100-32-trace-12f5cb88", (344, 341, 10516, 23)),
        ("matrixmul-32-32-trace-aba4ea32", (4416, 4352, 139264, 138)),
    ] {
        let list = KernelList::open(&data().join(dir).join("kernelslist.g")).unwrap();
        let kernels: Vec<&Path> = list.kernels().collect();
        assert_eq!(kernels.len(), 1);
        assert_eq!(tally(kernels[0]).unwrap(), want, "{dir}");
        let h = TraceReader::open(kernels[0]).unwrap().header().clone();
        assert_eq!(h.binary_version, 61);
        assert_eq!(h.tracer_version.as_deref(), Some("4"));
        assert!(!h.prefix && !h.immediate && !h.lineinfo);
    }
}

#[test]
fn kernel_list_keeps_memcpy_commands() {
    let list =
        KernelList::open(&data().join("matrixmul-32-32-trace-aba4ea32/kernelslist.g")).unwrap();
    assert_eq!(list.commands.len(), 3);
    assert!(matches!(
        &list.commands[0],
        accelsim_trace::Command::MemcpyHtoD {
            address: 0x7fb02d700000,
            bytes: 4096,
            ..
        }
    ));
}

const HEADER_V4: &str = "-kernel name = _Z1kv\n-kernel id = 1\n-grid dim = (2,1,1)\n-block dim = (64,1,1)\n-shmem = 0\n-nregs = 8\n-binary version = 70\n-cuda stream id = 0\n-accelsim tracer version = 4\n-enable lineinfo = 0\n\n#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [adrrescompress?] [mem_addresses]\n\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn body(insts: &[&str]) -> String {
    let mut s = String::from("#BEGIN_TB\n\nthread block = 0,0,0\n\nwarp = 0\n");
    s.push_str(&format!("insts = {}\n", insts.len()));
    for i in insts {
        s.push_str(i);
        s.push_str(" \n");
    }
    s.push_str("\nwarp = 1\ninsts = 0\n#END_TB\n");
    s
}

#[test]
fn address_modes_immediates_lineinfo_and_prefix() {
    let dir = tempfile::tempdir().unwrap();
    // v4 with all three address modes, a one-lane mode 2 and a masked-off memory instruction.
    let text = HEADER_V4.to_string()
        + &body(&[
            "0010 0000000f 1 R4 LDG.E 1 R2 4 0 0x1000 0x1004 0x1008 0x100c",
            "0020 ffffffff 1 R4 LDG.E 1 R2 4 1 0x7fd165500000 4",
            "0030 0000000d 0 STG.E 2 R2 R4 4 2 0x2000 8 4",
            "0040 00000001 0 STG.E 2 R2 R4 4 2 0x2000",
            "0050 00000000 0 STG.E 2 R2 R4 4 1 0x0 0",
            "0060 ffffffff 0 EXIT 0 0",
        ]);
    let p = write(dir.path(), "k4.traceg", &text);
    let mut r = TraceReader::open(&p).unwrap();
    let mut modes = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        if let Event::Inst(i) = e {
            modes.push(i.address_mode);
        }
    }
    assert_eq!(
        modes,
        vec![
            Some(AddressMode::ListAll),
            Some(AddressMode::BaseStride),
            Some(AddressMode::BaseDelta),
            Some(AddressMode::BaseDelta),
            Some(AddressMode::BaseStride),
            None
        ]
    );
    // The same instructions with addresses decoded per active lane.
    let mut r = TraceReader::open(&p).unwrap();
    r.decode_addresses(true);
    let mut decoded = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        if let Event::Inst(_) = e {
            decoded.push(r.addresses().to_vec());
        }
    }
    assert_eq!(
        decoded[0],
        vec![(0, 0x1000), (1, 0x1004), (2, 0x1008), (3, 0x100c)]
    );
    assert_eq!(decoded[1].len(), 32);
    assert_eq!(decoded[1][31], (31, 0x7fd165500000 + 31 * 4));
    // mask 0xd: lanes 0, 2, 3; deltas 8 then 4.
    assert_eq!(decoded[2], vec![(0, 0x2000), (2, 0x2008), (3, 0x200c)]);
    assert_eq!(decoded[3], vec![(0, 0x2000)]);
    assert!(decoded[4].is_empty() && decoded[5].is_empty());
    // v5: immediates; lineinfo: a leading line number.
    let v5 = HEADER_V4
        .replace("version = 4", "version = 5")
        .replace("lineinfo = 0", "lineinfo = 1")
        + &body(&[
            "12 0010 ffffffff 1 R1 MOV 0 0 -7",
            "13 0020 ffffffff 1 R4 LDG.E 1 R2 4 1 0x100 4 0",
        ]);
    let p = write(dir.path(), "k5.traceg", &v5);
    let mut r = TraceReader::open(&p).unwrap();
    let mut seen = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        if let Event::Inst(i) = e {
            seen.push((i.line_num, i.immediate));
        }
    }
    assert_eq!(seen, vec![(Some(12), Some(-7)), (Some(13), Some(0))]);
    // No version line: 8-line header and the per-line block/warp prefix.
    let old = "-kernel name = _Z1kv\n-kernel id = 1\n-grid dim = (1,1,1)\n-block dim = (32,1,1)\n-shmem = 0\n-nregs = 8\n-binary version = 61\n-cuda stream id = 0\n\n".to_string()
        + &body(&["0 0 0 0 0010 ffffffff 1 R1 MOV 0 0"]).replace("\nwarp = 1\ninsts = 0\n", "\n");
    let p = write(dir.path(), "k0.traceg", &old);
    assert_eq!(tally(&p).unwrap().0, 1);
}

#[test]
fn compressed_traces_read_like_plain() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read(data().join("vectoradd-100-32-trace-0c94f481/kernel-1.traceg")).unwrap();
    let mut xz = xz2::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(&text).unwrap();
    let xz_path = dir.path().join("kernel-1.traceg.xz");
    std::fs::write(&xz_path, xz.finish().unwrap()).unwrap();
    let zst_path = dir.path().join("kernel-1.tracez");
    std::fs::write(&zst_path, zstd::encode_all(&text[..], 3).unwrap()).unwrap();
    assert_eq!(tally(&xz_path).unwrap(), (344, 341, 10516, 23));
    assert_eq!(tally(&zst_path).unwrap(), (344, 341, 10516, 23));
    // Truncated compression is an error, not a short count.
    let bytes = std::fs::read(&xz_path).unwrap();
    std::fs::write(&xz_path, &bytes[..bytes.len() / 2]).unwrap();
    assert!(tally(&xz_path).is_err());
}

fn error_of(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "bad.traceg", text);
    tally(&p).unwrap_err().to_string()
}

#[test]
fn bad_traces_are_errors_with_file_and_line() {
    let good = HEADER_V4.to_string() + &body(&["0010 ffffffff 1 R1 MOV 0 0"]);
    assert!(error_of(&good.replace("insts = 1", "insts = 2")).contains("fewer instruction lines"));
    assert!(error_of(&good.replace("insts = 1", "insts = 0")).contains("more instruction lines"));
    let e = error_of(&(HEADER_V4.to_string() + "0010 ffffffff 1 R1 MOV 0 0\n"));
    assert!(
        e.contains("bad.traceg:14:") && e.contains("outside a thread block"),
        "{e}"
    );
    assert!(error_of(&good.replace("1 R1 MOV 0 0", "2 R1 MOV 0 0")).contains("register"));
    let mem = HEADER_V4.to_string() + &body(&["0010 ffffffff 1 R1 LDG 0 4 7 0x10"]);
    assert!(error_of(&mem).contains("unknown address mode '7'"));
    assert!(error_of(&good.replace("#END_TB\n", "")).contains("truncated"));
    assert!(error_of(&good.replace("ffffffff", "fffffffff")).contains("mask"));
    assert!(error_of(&good.replace("MOV 0 0", "MOV 0 0 9")).contains("unexpected '9'"));
    assert!(error_of("-kernel id = 1\n").contains("header"));
}

/// Every event with the line it was read at, then the error if one ends the file; `general`
/// forces the general path (asking for addresses does), otherwise short lines take the fast
/// path.
fn events(path: &Path, general: bool) -> (Vec<String>, Option<String>) {
    let mut r = TraceReader::open(path).unwrap();
    r.decode_addresses(general);
    let mut out = Vec::new();
    loop {
        match r.next_event() {
            Ok(Some(e)) => out.push(format!("{e:?}")),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e.to_string())),
        }
        let line = r.line_number();
        out.push(format!("@{line}"));
    }
}

/// Instruction lines of every length around the 64-byte cut, odd spellings the fast path
/// declines, CRLF endings and blank lines inside a warp: both paths give the same events and
/// line numbers.
#[test]
fn short_line_path_reads_as_the_general_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for k in 0..70 {
        let op = format!("OP{}", "X".repeat(k % 40));
        let regs = (0..k % 4).map(|r| format!(" R{r}")).collect::<String>();
        let mut line = format!("{:04x} ffffffff 0 {op} {}{regs} 0", 8 * k, k % 4);
        match k % 7 {
            0 => line.push(' '),
            1 => line.push_str(" \r"),
            2 => line = line.replace(" 0 OP", "\t0 OP"),
            3 => line = line.replace(" 0 OP", "  0 OP"),
            4 => lines.push(String::new()),
            _ => {}
        }
        lines.push(line);
    }
    let insts = lines.iter().filter(|l| !l.is_empty()).count();
    let text = format!(
        "{HEADER_V4}#BEGIN_TB\nthread block = 0,0,0\nwarp = 0\ninsts = {insts}\n{}\n#END_TB\n",
        lines.join("\n")
    );
    let p = write(dir.path(), "k.traceg", &text);
    let (fast, err) = events(&p, false);
    assert_eq!(err, None);
    assert_eq!(fast.len(), 2 * (insts + 3));
    assert_eq!((fast.clone(), err), events(&p, true));
    // Errors found on either path read the same (announced counts that disagree, a register
    // count that disagrees, a bad mask).
    for (from, to) in [
        (format!("insts = {insts}"), format!("insts = {}", insts + 1)),
        (format!("insts = {insts}"), format!("insts = {}", insts - 1)),
        (
            "0028 ffffffff 0 OPXXXXX 1 R0 0".into(),
            "0028 ffffffff 0 OPXXXXX 2 R0 0".into(),
        ),
        ("0030 ffffffff".into(), "0030 fffffffg".into()),
    ] {
        assert!(text.contains(&from), "{from}");
        let p = write(dir.path(), "bad.traceg", &text.replacen(&from, &to, 1));
        let (fast, err) = events(&p, false);
        assert!(err.is_some(), "{to}");
        assert_eq!((fast, err), events(&p, true), "{to}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_lines_never_panic(lines in proptest::collection::vec("(warp = 0|insts = [0-3]|#BEGIN_TB|thread block = 0,0,0|[0-9a-f]{4} [0-9a-f]{8} [01] R1 LDG [01] R2 [04] [0-2]( 0x[0-9a-f]{1,16}| -?[0-9]{1,3}){0,6}|[-#=:,()0-9a-fRxA-Z_. ]{0,40})", 0..20)) {
        let dir = tempfile::tempdir().unwrap();
        let text = HEADER_V4.to_string() + &lines.join("\n");
        let p = write(dir.path(), "f.traceg", &text);
        let _ = tally(&p);
        if let Ok(mut r) = TraceReader::open(&p) {
            r.decode_addresses(true);
            while let Ok(Some(_)) = r.next_event() {}
        }
    }

    /// Random instruction-like lines inside a warp (so that the short-line path reads them,
    /// with more than 64 bytes after each): the same events and line numbers as the general
    /// path, and an error at the same line (the wording may differ: asking for addresses, which
    /// forces the general path, also checks address tokens that counting only steps over).
    #[test]
    fn short_line_path_agrees_on_random_lines(
        lines in proptest::collection::vec("([0-9a-f]{1,5}[ \t]{1,2}[0-9a-fA-Fg]{7,9} [0-2]( R[0-9]{1,3}| UR7){0,2} [A-Z.]{1,12} [0-3]( R[0-9]{1,2}){0,3} [048] [0-2]?( 0x[0-9a-f]{1,8}| -?[0-9]{1,3}){0,3} ?\r?|warp = 1|#END_TB|)", 1..12),
        insts in 0usize..14,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let body = lines.join("\n");
        let text = format!(
            "{HEADER_V4}#BEGIN_TB\nthread block = 0,0,0\nwarp = 0\ninsts = {insts}\n{body}\n{}\n",
            "#END_TB\n".repeat(12)
        );
        let p = write(dir.path(), "f.traceg", &text);
        let at_line = |(ev, err): (Vec<String>, Option<String>)| {
            (ev, err.map(|e| e.split(": ").next().unwrap_or_default().to_string()))
        };
        prop_assert_eq!(at_line(events(&p, false)), at_line(events(&p, true)));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.traceg");
        std::fs::write(&p, &bytes).unwrap();
        let _ = tally(&p);
        let _ = KernelList::open(&p);
    }
}
