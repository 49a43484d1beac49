//! Generated multi-kernel traces in every tracer version and address mode, with known counts.

use std::fmt::Write as _;
use std::path::Path;

use accelsim_trace::KernelList;
use bbv_gpu::{count_list, CountMode};

/// A small deterministic generator (xorshift), so the tests need no dependency.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug)]
enum Version {
    Unversioned,
    V1_2,
    V3,
    V4 { lineinfo: bool, immediate: bool },
    V5,
}

#[derive(Default, Debug, PartialEq)]
struct Expected {
    warp: u64,
    pred_on: u64,
    thread: u64,
    mem: u64,
}

/// Writes one kernel trace; returns what it holds.
fn kernel(path: &Path, id: u64, version: Version, g: &mut Gen) -> Expected {
    let grid = 1 + g.below(3) as u32;
    let threads = 32 * (1 + g.below(3) as u32) - g.below(2) as u32 * 7;
    let warps = threads.div_ceil(32);
    let (prefix, lineinfo, immediate) = match version {
        Version::Unversioned | Version::V1_2 => (true, false, false),
        Version::V3 => (false, false, false),
        Version::V4 {
            lineinfo,
            immediate,
        } => (false, lineinfo, immediate),
        Version::V5 => (false, false, true),
    };
    let mut s = String::new();
    writeln!(s, "-kernel name = _Z6kernelILi{id}EEvPf").unwrap();
    writeln!(s, "-kernel id = {id}").unwrap();
    writeln!(s, "-grid dim = ({grid},1,1)").unwrap();
    writeln!(s, "-block dim = ({threads},1,1)").unwrap();
    s.push_str("-shmem = 0\n-nregs = 16\n-binary version = 70\n-cuda stream id = 0\n");
    let v = match version {
        Version::Unversioned => None,
        Version::V1_2 => Some("1.2"),
        Version::V3 => Some("3"),
        Version::V4 { .. } => Some("4"),
        Version::V5 => Some("5"),
    };
    if let Some(v) = v {
        s.push_str("-shmem base_addr = 0x00007f0000000000\n-local mem base_addr = 0x00007f1000000000\n-nvbit version = 1.5.5\n");
        writeln!(s, "-accelsim tracer version = {v}").unwrap();
    }
    if let Version::V4 { lineinfo, .. } = version {
        writeln!(s, "-enable lineinfo = {}", u8::from(lineinfo)).unwrap();
    }
    s.push('\n');
    if v.is_some() {
        write!(s, "#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [adrrescompress?] [mem_addresses]").unwrap();
        if immediate && !matches!(version, Version::V5) {
            s.push_str(" immediate");
        }
        s.push_str("\n\n");
    }
    let mut e = Expected::default();
    for tb in 0..grid {
        // Thread blocks with no instruction are dropped by the tracer.
        if g.below(5) == 0 && tb > 0 {
            continue;
        }
        writeln!(s, "#BEGIN_TB\n\nthread block = {tb},0,0\n").unwrap();
        for w in 0..warps {
            let n = g.below(40);
            writeln!(s, "warp = {w}\ninsts = {n}").unwrap();
            for i in 0..n {
                let mask: u32 = match g.below(6) {
                    0 => 0,
                    1 => 1,
                    2 => 0x0000_ffff,
                    3 => g.next() as u32,
                    _ => 0xffff_ffff,
                };
                let mut line = String::new();
                if prefix {
                    write!(line, "{tb} 0 0 {w} ").unwrap();
                }
                if lineinfo {
                    write!(line, "{} ", 10 + i).unwrap();
                }
                write!(line, "{:04x} {mask:08x} ", 16 * (i + 1)).unwrap();
                e.warp += 1;
                e.pred_on += u64::from(mask != 0);
                e.thread += u64::from(mask.count_ones());
                let lanes = mask.count_ones();
                match g.below(4) {
                    0 => line.push_str("1 R4 IMAD.MOV.U32 2 R255 R2 0 "),
                    1 => line.push_str("0 EXIT 0 0 "),
                    _ => {
                        e.mem += 1;
                        line.push_str("1 R8 LDG.E.64 1 R2 8 ");
                        if mask == 0 {
                            line.push_str("1 0x0 0 ");
                        } else {
                            match g.below(3) {
                                0 => {
                                    line.push_str("0 ");
                                    for l in 0..lanes {
                                        write!(line, "0x{:016x} ", 0x7000_0000 + 8 * u64::from(l))
                                            .unwrap();
                                    }
                                }
                                1 if lanes >= 2 => line.push_str("1 0x7f0000001000 8 "),
                                _ => {
                                    line.push_str("2 0x7f0000002000 ");
                                    for _ in 1..lanes {
                                        line.push_str("-16 ");
                                    }
                                }
                            }
                        }
                    }
                }
                if immediate {
                    write!(line, "{} ", g.below(100) as i64 - 50).unwrap();
                }
                s.push_str(&line);
                s.push('\n');
            }
            s.push('\n');
        }
        s.push_str("#END_TB\n\n");
    }
    std::fs::write(path, s).unwrap();
    e
}

#[test]
fn generated_traces_count_exactly_in_every_version() {
    let versions = [
        Version::Unversioned,
        Version::V1_2,
        Version::V3,
        Version::V4 {
            lineinfo: false,
            immediate: false,
        },
        Version::V4 {
            lineinfo: true,
            immediate: false,
        },
        Version::V4 {
            lineinfo: false,
            immediate: true,
        },
        Version::V5,
    ];
    let mut g = Gen(0x1234_5678_9abc_def1);
    for version in versions {
        let dir = tempfile::tempdir().unwrap();
        let mut list = String::from("MemcpyHtoD,0x00007f0000000000,4096\n");
        let mut expected = Vec::new();
        // Kernel ids with gaps, as the tracer numbers every launch.
        for (n, id) in [1u64, 2, 5, 6].iter().enumerate() {
            let name = format!("kernel-{id}.traceg");
            expected.push(kernel(&dir.path().join(&name), *id, version, &mut g));
            list.push_str(&name);
            list.push('\n');
            if n == 1 {
                list.push_str("MemcpyHtoD,0x00007f0000100000,64\n");
            }
        }
        let list_path = dir.path().join("kernelslist.g");
        std::fs::write(&list_path, list).unwrap();
        let kl = KernelList::open(&list_path).unwrap();
        assert_eq!(kl.commands.len(), 6);
        let counts = count_list(&kl).unwrap();
        for (c, e) in counts.iter().zip(&expected) {
            let warp = CountMode {
                thread_level: false,
                exclude_pred_off: false,
            };
            let on = CountMode {
                thread_level: false,
                exclude_pred_off: true,
            };
            let thread = CountMode {
                thread_level: true,
                exclude_pred_off: true,
            };
            let got = Expected {
                warp: c.count(warp),
                pred_on: c.count(on),
                thread: c.count(thread),
                mem: c.mem_insts,
            };
            assert_eq!(&got, e, "{version:?} {}", c.path.display());
            assert_eq!(
                c.sorted_opcodes().iter().map(|(_, n)| n).sum::<u64>(),
                e.warp
            );
        }
    }
}

/// One instruction of a planted program: (pc, opcode, mask, memory).
type Op = (u64, &'static str, u32, bool);

fn program(phase: usize, trips: usize) -> Vec<Op> {
    let mut p: Vec<Op> = Vec::new();
    match phase {
        // Kernel kA, loop path.
        0 => {
            for i in 0..5 {
                p.push((i * 16, "IMAD.MOV.U32", 0xffff_ffff, false));
            }
            for _ in 0..trips {
                p.push((0x50, "LDG.E", 0xffff_ffff, true));
                p.push((0x60, "FFMA", 0xffff_ffff, false));
                p.push((0x70, "ISETP.GE.AND", 0xffff_ffff, false));
                p.push((0x80, "BRA", 0xffff_ffff, false));
            }
            p.push((0x90, "EXIT", 0xffff_ffff, false));
        }
        // Kernel kB: straight line, half the lanes, stores.
        1 => {
            for i in 0..12 {
                let (op, mem) = if i % 3 == 0 {
                    ("STG.E", true)
                } else {
                    ("IADD3", false)
                };
                p.push((i * 16, op, 0x0000_ffff, mem));
            }
            p.push((12 * 16, "EXIT", 0x0000_ffff, false));
        }
        // Kernel kA again, the other path: divergent masks, shared memory.
        _ => {
            for i in 0..5 {
                p.push((i * 16, "IMAD.MOV.U32", 0xffff_ffff, false));
            }
            p.push((0x50, "BRA", 0xffff_ffff, false));
            for _ in 0..trips {
                p.push((0x200, "LDS.U.32", 0x0f0f_0f0f, true));
                p.push((0x210, "FADD", 0x0f0f_0f0f, false));
                p.push((0x220, "BRA", 0x0f0f_0f0f, false));
            }
            p.push((0x230, "EXIT", 0xffff_ffff, false));
        }
    }
    p
}

fn planted_launch(path: &Path, id: u64, phase: usize, blocks: u32, extra_trip: usize) {
    let name = if phase == 1 { "_Z2kBv" } else { "_Z2kAv" };
    let mut s = format!(
        "-kernel name = {name}\n-kernel id = {id}\n-grid dim = ({blocks},1,1)\n-block dim = (64,1,1)\n-shmem = 0\n-nregs = 16\n-binary version = 70\n-cuda stream id = 0\n-accelsim tracer version = 4\n-enable lineinfo = 0\n\n#traces format = PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [adrrescompress?] [mem_addresses]\n\n"
    );
    for tb in 0..blocks {
        writeln!(s, "#BEGIN_TB\nthread block = {tb},0,0").unwrap();
        for w in 0..2 {
            let trips = 40 + if tb == 0 && w == 1 { extra_trip } else { 0 };
            let prog = program(phase, trips);
            writeln!(s, "warp = {w}\ninsts = {}", prog.len()).unwrap();
            for (pc, op, mask, mem) in prog {
                if mem {
                    writeln!(
                        s,
                        "{pc:04x} {mask:08x} 1 R2 {op} 1 R4 4 1 0x7f0000000000 4 "
                    )
                    .unwrap();
                } else {
                    writeln!(s, "{pc:04x} {mask:08x} 1 R2 {op} 2 R4 R5 0 ").unwrap();
                }
            }
        }
        s.push_str("#END_TB\n");
    }
    std::fs::write(path, s).unwrap();
}

#[test]
fn sampling_keeps_planted_phases_apart_within_one_percent() {
    use bbv_gpu::sample::estimate;
    use bbv_gpu::select::{select, Rule, SampleOptions, TimedLaunch};
    let dir = tempfile::tempdir().unwrap();
    let mut list = String::new();
    let mut phases = Vec::new();
    let mut g = Gen(0xfeed_beef_1234_5678);
    for launch in 0..18u64 {
        let phase = [0, 1, 2][(launch as usize * 7 / 3) % 3];
        let blocks = 2 + g.below(4) as u32;
        let name = format!("kernel-{}.traceg", launch + 1);
        planted_launch(
            &dir.path().join(&name),
            launch + 1,
            phase,
            blocks,
            g.below(2) as usize,
        );
        list.push_str(&name);
        list.push('\n');
        phases.push(phase);
    }
    let list_path = dir.path().join("kernelslist.g");
    std::fs::write(&list_path, list).unwrap();
    let kl = KernelList::open(&list_path).unwrap();
    let counts = count_list(&kl).unwrap();
    let bv = bbv_gpu::list_block_vectors(&kl, true).unwrap();
    let (counts2, bv2) = bbv_gpu::scan_list(&kl, false).unwrap();
    assert_eq!(counts2, counts, "one pass counts like count_list");
    assert_eq!(bv2.vectors, bv.vectors);
    // Per-thread-block vectors add up to the launch vectors.
    for (launch, v) in bv.vectors.iter().enumerate() {
        let mut sum = std::collections::BTreeMap::new();
        for (_, _, tb) in bv.block_vectors.iter().filter(|(l, _, _)| *l == launch) {
            for &(id, n) in tb {
                *sum.entry(id).or_insert(0u64) += n;
            }
        }
        assert_eq!(&sum.into_iter().collect::<Vec<_>>(), v);
    }
    let launches: Vec<TimedLaunch> = (counts.iter())
        .map(|c| TimedLaunch::new(c, Vec::new()))
        .collect();
    // bbv's rule: a launch of each phase (more where sizes differ), none standing for another
    // phase; Sieve's does not see phases.
    for (rule, spread) in [(Rule::Bbv, 0.1), (Rule::Sieve, 0.5)] {
        let o = SampleOptions {
            rule,
            max_k: 10,
            spread,
        };
        let picks = select(&launches, Some(&bv.vectors), &o).unwrap();
        let mut picked: Vec<usize> = picks.iter().map(|p| phases[p.launch]).collect();
        picked.sort();
        if rule == Rule::Bbv {
            picked.dedup();
            assert_eq!(picked, vec![0, 1, 2], "every planted phase picked");
            for p in &picks {
                assert!(p.members.iter().all(|&m| phases[m] == phases[p.launch]));
            }
        }
        assert_eq!(
            picks.iter().map(|p| p.members.len()).sum::<usize>(),
            counts.len(),
            "every launch represented once"
        );
        for e in estimate(&counts, &picks) {
            if rule == Rule::Bbv {
                assert!(
                    e.relative_error() < 0.01,
                    "{rule:?}: {} estimated {} for {}",
                    e.metric,
                    e.estimate,
                    e.actual
                );
            }
        }
    }
}
