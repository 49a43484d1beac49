//! Live counts read back from a real run: `data/h200` is `scripts/check-gpu`'s run of
//! `tools/cupti/kernels.cu` on an NVIDIA H200 (CUPTI 13.5, driver 580.159.04): the injection
//! library's per-PC counts and the cubin it saved. The counts of every launch are checked
//! against counts derived by hand from the kernels' SASS and the program's data.

use std::path::{Path, PathBuf};

use bbv_cuda::aggregate::aggregate;
use bbv_cuda::job::Live;
use bbv_cuda::live;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200")
}

fn nvdisasm() -> PathBuf {
    bbv_gpucfg::tools::nvdisasm().expect("nvdisasm (scripts/cupti installs it)")
}

/// The program's data: its own generator (kernels.cu's main), seed 12345.
fn program_data() -> Vec<u64> {
    let mut seed: u32 = 12345;
    (0..1 << 16)
        .map(|_| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            1 + u64::from((seed >> 16) % 17)
        })
        .collect()
}

/// SASS instructions one lane runs (kernels.cu's sm_90 code, blocks as `bbv gpu cfg` cuts them;
/// the test checks those sizes first): see tools/cupti/check_kernels.py for the derivation.
fn lane_path(kernel: &str, i: usize, n: usize, d: &[u64]) -> u64 {
    if i >= n {
        return 8;
    }
    match kernel {
        "_Z9trip_loopPKiPii" => 29 + 5 * d[i],
        "_Z12uniform_loopPKiPii" => 28 + 5 * d[i >> 5],
        "_Z7divergePKiPii" => 20 + if d[i].is_multiple_of(2) { 4 } else { 0 },
        _ => {
            let j = (i & 3) as u64;
            26 + if j > 0 { 3 + 5 * j } else { 0 }
        }
    }
}

/// A warp's instructions where its lanes never wait for each other; None elsewhere.
fn warp_path(kernel: &str, w: usize, n: usize, d: &[u64]) -> Option<u64> {
    let active: Vec<usize> = (w * 32..w * 32 + 32).filter(|&i| i < n).collect();
    if active.is_empty() {
        return Some(8);
    }
    match kernel {
        "_Z12uniform_loopPKiPii" => Some(28 + 5 * d[active[0] >> 5]),
        "_Z7divergePKiPii" => Some(
            20 + if active.iter().any(|&i| d[i].is_multiple_of(2)) {
                4
            } else {
                0
            },
        ),
        _ => None,
    }
}

const SIZES: [usize; 4] = [32, 1000, 4096, 1 << 16];
const KERNELS: [(&str, usize); 4] = [
    ("_Z9trip_loopPKiPii", 128),
    ("_Z12uniform_loopPKiPii", 128),
    ("_Z7divergePKiPii", 256),
    ("_Z6callerPKiPii", 64),
];

#[test]
fn the_kernels_blocks_are_those_the_derivation_assumes() {
    let cubin = data().join("raw/cubins/4e5b5de8.cubin");
    let functions = bbv_gpucfg::sass::disassemble(&nvdisasm(), &cubin).unwrap();
    let sizes = |name: &str| -> Vec<(u64, u32)> {
        let f = functions.iter().find(|f| f.name == name).unwrap();
        let cfg = bbv_gpucfg::sass::cfg(f);
        // Blocks that run (the trailing self-loop and NOP padding never do).
        cfg.blocks
            .iter()
            .filter(|b| {
                !f.instructions.iter().any(|i| {
                    i.offset == b.start && (i.opcode == "NOP" || b.successors == [b.start])
                })
            })
            .map(|b| (b.start, b.size))
            .collect()
    };
    // nvdisasm 13.5 labels every EXIT, so each starts a block of its own (13.2 did not).
    assert_eq!(
        sizes("_Z9trip_loopPKiPii"),
        [
            (0x0, 7),
            (0x70, 1),
            (0x80, 9),
            (0x110, 3),
            (0x140, 5),
            (0x190, 1),
            (0x1a0, 2),
            (0x1c0, 1),
            (0x1d0, 4),
            (0x210, 1)
        ]
    );
    assert_eq!(
        sizes("_Z12uniform_loopPKiPii"),
        [
            (0x0, 7),
            (0x70, 1),
            (0x80, 9),
            (0x110, 3),
            (0x140, 5),
            (0x190, 1),
            (0x1a0, 2),
            (0x1c0, 1),
            (0x1d0, 3),
            (0x200, 1)
        ]
    );
    assert_eq!(
        sizes("_Z7divergePKiPii"),
        [
            (0x0, 7),
            (0x70, 1),
            (0x80, 11),
            (0x130, 1),
            (0x140, 3),
            (0x170, 1)
        ]
    );
    assert_eq!(
        sizes("_Z6callerPKiPii"),
        [
            (0x0, 7),
            (0x70, 1),
            (0x80, 7),
            (0xf0, 1),
            (0x100, 3),
            (0x130, 1),
            (0x140, 2),
            (0x160, 1),
            (0x170, 5),
            (0x1c0, 2),
            (0x1e0, 4)
        ]
    );
}

#[test]
fn every_launch_counts_what_its_lanes_ran() {
    let live = Live::load(&data(), &nvdisasm()).unwrap();
    let d = program_data();
    assert!(live.run.complete);
    assert_eq!(live.run.chip.as_deref(), Some("GH100"));
    assert_eq!(live.launches.len(), 16);
    let mut warp_checked = 0;
    for (l, (n, (kernel, tpb))) in live.launches.iter().zip(
        SIZES
            .iter()
            .flat_map(|&n| KERNELS.iter().map(move |k| (n, *k))),
    ) {
        assert_eq!(l.count.header.name, kernel);
        let lanes = n.div_ceil(tpb) * tpb;
        let threads: u64 = (0..lanes).map(|i| lane_path(kernel, i, n, &d)).sum();
        assert_eq!(l.thread_insts_all, threads, "{kernel} n={n}: thread level");
        let warps: Option<u64> = (0..lanes / 32).map(|w| warp_path(kernel, w, n, &d)).sum();
        if let Some(w) = warps {
            assert_eq!(l.count.warp_insts, w, "{kernel} n={n}: warp level");
            warp_checked += 1;
        }
        // Every counted instruction found its place, and within a block every instruction ran
        // as often as the block's first.
        assert_eq!(l.unplaced, 0, "{kernel} n={n}");
        assert_eq!(l.uneven_blocks, 0, "{kernel} n={n}");
        assert_eq!(l.pcs.counts.values().sum::<u64>(), l.count.warp_insts);
    }
    assert_eq!(warp_checked, 8);
}

#[test]
fn flow_in_equals_flow_out_where_a_block_has_one_way_in_and_out() {
    let live = Live::load(&data(), &nvdisasm()).unwrap();
    let mut checked = 0;
    for l in &live.launches {
        let k = live
            .code
            .kernels
            .values()
            .find(|k| k.function.name == l.count.header.name)
            .unwrap();
        let blocks = &k.cfg.blocks;
        for b in blocks {
            let preds: Vec<&bbv_gpucfg::sass::StaticBlock> = blocks
                .iter()
                .filter(|p| p.successors.contains(&b.start))
                .collect();
            // A block entered only from one block that can go nowhere else runs as often as it,
            // lane for lane (a call's return, which the CFG does not draw, is left out).
            // Nor one whose last instruction may leave the function (a predicated EXIT: the
            // warps that take it go nowhere).
            let last = preds
                .first()
                .map(|p| p.start + 16 * (u64::from(p.size) - 1));
            let leaves = k.function.instructions.iter().any(|i| {
                Some(i.offset) == last && i.guard.is_some() && matches!(i.base(), "EXIT" | "RET")
            });
            if preds.len() == 1
                && preds[0].successors.len() == 1
                && preds[0].start != b.start
                && !leaves
            {
                let inn = l.threads.get(&preds[0].start).copied().unwrap_or(0);
                let out = l.threads.get(&b.start).copied().unwrap_or(0);
                let is_call = k
                    .function
                    .instructions
                    .iter()
                    .any(|i| i.base() == "CALL" && i.offset + 16 == b.start);
                if !is_call {
                    assert_eq!(inn, out, "{} block 0x{:x}", l.count.header.name, b.start);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 16, "{checked}");
}

#[test]
fn the_block_vectors_add_up_to_the_launches() {
    let live = Live::load(&data(), &nvdisasm()).unwrap();
    for (v, l) in live.vectors.vectors.iter().zip(&live.launches) {
        assert_eq!(v.iter().map(|&(_, n)| n).sum::<u64>(), l.count.warp_insts);
    }
    // Each kernel's blocks are the same in every launch: 4 kernels, blocks that ran.
    let kernels: std::collections::BTreeSet<&str> = live
        .vectors
        .blocks
        .iter()
        .map(|b| b.kernel.as_str())
        .collect();
    assert_eq!(kernels.len(), 4);
}

#[test]
fn a_damaged_file_is_refused_at_its_line() {
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data().join("raw/launches.txt")).unwrap();
    let cases: [(&str, String, &str); 5] = [
        (
            "header",
            text.replacen("bbv-cupti 1", "bbv-cupti 9", 1),
            ":1: not a bbv-cupti file",
        ),
        (
            "pc field",
            text.replacen("pc 4e5b5de8 15 0 4 ", "pc 4e5b5de8 15 0 x ", 1),
            ":8: x is not a number",
        ),
        (
            "crc",
            text.replacen("pc 4e5b5de8", "pc zz", 1),
            ":8: zz is not a CRC",
        ),
        (
            "record",
            text.replacen("end 0 ", "fin 0 ", 1),
            "unknown record fin",
        ),
        (
            "end count",
            text.replacen("end 0 34", "end 0 35", 1),
            "launch 0 ends as 0 with 35 records, 34 read",
        ),
    ];
    for (what, body, want) in cases {
        let p = t.path().join("launches.txt");
        std::fs::write(&p, body).unwrap();
        let e = live::read(&p).unwrap_err().to_string();
        assert!(e.contains(want), "{what}: {e}");
        assert!(e.starts_with(&p.display().to_string()), "{what}: {e}");
    }
}

#[test]
fn a_run_cut_off_inside_a_launch_keeps_the_launches_before() {
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data().join("raw/launches.txt")).unwrap();
    let cut = text.find("launch 2 ").unwrap() + 200;
    let p = t.path().join("launches.txt");
    std::fs::write(&p, &text[..text[..cut].rfind('\n').unwrap() + 1]).unwrap();
    let run = live::read(&p).unwrap();
    assert!(!run.complete);
    assert_eq!(run.launches.len(), 2);
    assert_eq!(run.errors, ["launch 2 has no end: its counts were cut off"]);
    let code = bbv_cuda::aggregate::Code::default();
    // Without the disassembly the counts stay whole, per PC.
    let counts = aggregate(&run, &code).unwrap();
    assert_eq!(counts[0].count.warp_insts, 153);
    assert_eq!(counts[0].undisassembled, 153);
    assert_eq!(counts[0].pcs.counts.values().sum::<u64>(), 153);
    assert_eq!(counts[0].unplaced, 0);
}

/// A timing run's file as the injection library writes it with BBV_GPU_TIMES=1 (launch lines
/// at the API's exit, kernel records as CUPTI hands its buffers back, out of launch order).
const TIMING: &str = "bbv-cupti 1
timing
corr 0 11
skipped 0 2 1 1 64 1 1 _Z4fillPfi
module 4e5b5de8 9000
corr 1 12
skipped 1 8 1 1 256 1 1 _Z6reducePKfPfi
graph 2 13
kernel 12 5000 9500 40 2048 512
kernel 11 1000 2000 16 0 0
kernel 13 9600 9700 8 0 0
done 2 0
";

#[test]
fn timing_runs_give_each_launch_its_gpu_time() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("launches.txt");
    std::fs::write(&p, TIMING).unwrap();
    let run = live::read(&p).unwrap();
    assert!(run.timing && run.complete);
    assert_eq!(run.correlations, [(0, 11), (1, 12)]);
    assert_eq!(run.graph_correlations, [13]);
    let times = bbv_cuda::times::join(&[run.clone(), run]).unwrap();
    let l = &times.launches[1];
    assert_eq!(
        (l.name.as_str(), l.ns.as_slice()),
        ("_Z6reducePKfPfi", &[4500, 4500][..])
    );
    assert_eq!(
        (l.grid, l.block, l.registers, l.shared),
        ([8, 1, 1], [256, 1, 1], 40, 2560)
    );
    assert_eq!(times.totals(), [5500, 5500]);
    assert_eq!(times.unattributed_ns, [100, 100]);
    // A kernel record that ends before it starts, or as it starts, is refused at its line.
    for start in [3000, 2000] {
        let record = format!("kernel 11 {start} 2000");
        std::fs::write(&p, TIMING.replace("kernel 11 1000 2000", &record)).unwrap();
        let e = live::read(&p).unwrap_err().to_string();
        let want = format!(
            ":10: kernel of correlation 11 ends (2000) no later than it starts ({start}): no \
             duration"
        );
        assert!(e.contains(&want), "{e}");
    }
    // A launch CUPTI gave no record for has no duration: refused, not counted as 0.
    std::fs::write(&p, TIMING.replace("kernel 11 1000 2000 16 0 0\n", "")).unwrap();
    let e = bbv_cuda::times::join(&[live::read(&p).unwrap()]).unwrap_err();
    assert!(
        e.to_string()
            .contains("launch 0 (_Z4fillPfi) has no duration"),
        "{e}"
    );
}
