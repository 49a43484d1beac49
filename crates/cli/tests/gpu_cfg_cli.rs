//! `bbv gpu cfg` on kernels compiled here and now (guests/gpu: CUDA with NVIDIA's pinned nvcc
//! from scripts/gpu-tools for sm_80 and sm_90, a jump table in PTX, OpenCL C with Debian's
//! clang for gfx90a, gfx1100 and gfx942). Every CFG is checked against one the test builds
//! itself from the plain disassembly with the documented rules, and NVIDIA's against the
//! blocks `nvdisasm -bbcfg` draws.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::bbv;

/// Block start -> (instructions, successors as (target start, kind)), per section/function.
type Graph = BTreeMap<(String, u64), (usize, BTreeSet<(Option<u64>, String)>)>;

fn nvidia_bin() -> PathBuf {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-tools"))
        .output()
        .expect("scripts/gpu-tools");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/guests/gpu")
        .join(name)
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn cfg_json(files: &[&Path], extra: &[&str]) -> serde_json::Value {
    let stdout = run(bbv().args(["gpu", "cfg"]).args(extra).args(files));
    serde_json::from_slice(&stdout).unwrap()
}

/// bbv's JSON as a [`Graph`] keyed by section (NVIDIA: the kernel holding the code; AMD: "")
/// and section offset.
fn from_json(file: &serde_json::Value, arch: &str) -> Graph {
    let kernels = file["kernels"].as_array().unwrap();
    let fns: Vec<&serde_json::Value> = kernels.iter().filter(|k| k["arch"] == arch).collect();
    let section = |f: &serde_json::Value| -> String {
        match (f["parent"].as_str(), arch.starts_with("sm_")) {
            (Some(p), _) => p.to_string(),
            (None, true) => f["mangled"].as_str().unwrap().to_string(),
            (None, false) => String::new(),
        }
    };
    let mut g = Graph::new();
    for f in &fns {
        let base = f["offset"].as_u64().unwrap();
        let blocks = f["blocks"].as_array().unwrap();
        let start = |i: u64| base + blocks[i as usize]["start"].as_u64().unwrap();
        for b in blocks {
            let mut succ = BTreeSet::new();
            for e in b["successors"].as_array().unwrap() {
                let kind = e["kind"].as_str().unwrap().to_string();
                let target = match (kind.as_str(), e["block"].as_u64()) {
                    ("call", Some(_)) => {
                        let callee = e["callee"].as_str().unwrap();
                        fns.iter()
                            .find(|c| c["mangled"] == callee && section(c) == section(f))
                            .map(|c| c["offset"].as_u64().unwrap())
                    }
                    ("call", None) => None,
                    (_, Some(i)) => Some(start(i)),
                    (_, None) => None,
                };
                succ.insert((target, kind));
            }
            let n = b["opcodes"].as_array().unwrap().len();
            assert_eq!(n as u64, b["instructions"].as_u64().unwrap());
            g.insert((section(f), base + b["start"].as_u64().unwrap()), (n, succ));
        }
    }
    g
}

/// A cubin section as the plain listing shows it: kernel name, (offset, text) per
/// instruction, label offsets.
type Section = (String, Vec<(u64, String)>, BTreeMap<String, u64>);

/// An AMDGPU function as the plain listing shows it: name, address, (offset, size, text).
type AmdFunction = (String, u64, Vec<(u64, u64, String)>);

/// One function's instructions as (offset, size, text).
struct Listing {
    insns: Vec<(u64, u64, String)>,
}

/// The leaders and edges of `insns` under `kind_of` (the ISA's rules): shared by both ISAs'
/// references since the block rule itself is the classic one.
fn reference_blocks(
    section: &str,
    l: &Listing,
    leaders: &BTreeSet<u64>,
    edges: impl Fn(usize) -> (Vec<(Option<u64>, &'static str)>, bool),
    g: &mut Graph,
) {
    let end = l.insns.last().map(|i| i.0 + i.1);
    let mut k = 0;
    while k < l.insns.len() {
        let start = l.insns[k].0;
        let mut j = k;
        loop {
            let (_, ends) = edges(j);
            let next = l.insns.get(j + 1).map(|i| i.0);
            if ends || next.is_none_or(|n| leaders.contains(&n)) {
                break;
            }
            j += 1;
        }
        let (mut succ, _) = edges(j);
        let next = l.insns[j].0 + l.insns[j].1;
        succ.retain(|(t, kind)| !(*kind == "fall-through" && Some(next) == end && t.is_some()));
        let succ = succ
            .into_iter()
            .map(|(t, kind)| (t, kind.to_string()))
            .collect();
        g.insert((section.to_string(), start), (j - k + 1, succ));
        k = j + 1;
    }
}

/// The reference CFG of a cubin from plain `nvdisasm -c`: a block starts at a function's
/// first instruction, at every printed label, after BRA/BRX/BRXU/JMP/JMX/JMXU/CALL/RET/EXIT/
/// KILL/BPT/RTT; `$kernel$name` labels start device functions; trailing NOPs and an otherwise
/// unreached branch to itself are padding.
fn sass_reference(text: &str) -> Graph {
    let mut g = Graph::new();
    let mut sections: Vec<Section> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(r) = line.strip_prefix(".section\t.text.") {
            sections.push((
                r.split(',').next().unwrap().to_string(),
                vec![],
                BTreeMap::new(),
            ));
        } else if let Some(r) = line.strip_prefix("/*") {
            let (off, body) = r.split_once("*/").unwrap();
            let off = u64::from_str_radix(off, 16).unwrap();
            let s = sections.last_mut().unwrap();
            for p in pending.drain(..) {
                s.2.insert(p, off);
            }
            s.1.push((off, body.trim().to_string()));
        } else if let Some(label) = line.strip_suffix(':') {
            if !label.starts_with(".text.") && !label.contains(' ') {
                pending.push(label.to_string());
            }
        }
    }
    let op = |body: &str| -> (bool, String, Option<String>, Vec<String>) {
        let guarded = body.starts_with('@') && !body.starts_with("@PT ");
        let b = if body.starts_with('@') {
            body.split_once(' ').unwrap().1.trim()
        } else {
            body
        };
        let base = b.split(['.', ' ', ';']).next().unwrap().to_string();
        let target = b
            .split_once("`(")
            .map(|(_, t)| t.split(')').next().unwrap().to_string());
        let list = b
            .split_once("BRANCH_TARGETS ")
            .map(|(_, t)| {
                t.split('"')
                    .next()
                    .unwrap()
                    .split(',')
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        (guarded, base, target, list)
    };
    for (name, insns, labels) in &sections {
        let mut starts: Vec<u64> = labels
            .iter()
            .filter(|(l, _)| l.starts_with('$'))
            .map(|(_, &o)| o)
            .collect();
        starts.insert(0, insns[0].0);
        for (fi, &fs) in starts.iter().enumerate() {
            let fe = starts.get(fi + 1).copied().unwrap_or(u64::MAX);
            let mut body: Vec<&(u64, String)> =
                insns.iter().filter(|i| i.0 >= fs && i.0 < fe).collect();
            while body.last().is_some_and(|i| op(&i.1).1 == "NOP") {
                body.pop();
            }
            if let Some(last) = body.last() {
                let (guarded, base, target, _) = op(&last.1);
                let own = target.as_ref().and_then(|t| labels.get(t)) == Some(&last.0);
                let others = insns
                    .iter()
                    .any(|i| i.0 != last.0 && op(&i.1).2 == target && target.is_some());
                if base == "BRA" && !guarded && own && !others {
                    body.pop();
                }
            }
            let control = [
                "BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET", "EXIT", "KILL", "BPT",
                "RTT",
            ];
            let mut leaders: BTreeSet<u64> = labels.values().copied().collect();
            leaders.insert(fs);
            for w in body.windows(2) {
                if control.contains(&op(&w[0].1).1.as_str()) {
                    leaders.insert(w[1].0);
                }
            }
            let l = Listing {
                insns: body.iter().map(|i| (i.0, 16, i.1.clone())).collect(),
            };
            let edges = |j: usize| {
                let (guarded, base, target, list) = op(&l.insns[j].2);
                let t = target.as_ref().and_then(|t| labels.get(t)).copied();
                let next = Some(l.insns[j].0 + 16);
                let mut e = match base.as_str() {
                    "BRA" | "JMP" => vec![(t, "taken")],
                    "BRX" | "BRXU" | "JMX" | "JMXU" => list
                        .iter()
                        .map(|t| (labels.get(t).copied(), "taken"))
                        .collect(),
                    "CALL" => vec![(t, "call"), (next, "fall-through")],
                    "RET" => vec![(None, "return")],
                    "EXIT" | "KILL" | "BPT" | "RTT" => vec![(None, "exit")],
                    _ => vec![(next, "fall-through")],
                };
                if guarded && !matches!(base.as_str(), "CALL") && control.contains(&base.as_str()) {
                    e.push((next, "fall-through"));
                }
                (e, control.contains(&base.as_str()))
            };
            reference_blocks(name, &l, &leaders, edges, &mut g);
        }
    }
    g
}

/// Block starts per section from `nvdisasm -bbcfg -poff` (DOT: a cluster per function, the
/// first offset printed in each node's label).
fn bbcfg_starts(dot: &str) -> BTreeSet<(String, u64)> {
    let mut out = BTreeSet::new();
    let mut section = String::new();
    for line in dot.lines() {
        if let Some(r) = line.strip_prefix("subgraph \"cluster_") {
            let name = r.split('"').next().unwrap();
            section = match name.strip_prefix('$') {
                Some(r) => r.split('$').next().unwrap().to_string(),
                None => name.to_string(),
            };
        } else if let Some(label) = line.strip_prefix("[label=\"") {
            let first = label
                .split(":\\ \\ \\ ")
                .next()
                .and_then(|s| s.rsplit(['>', 'l']).next())
                .unwrap();
            out.insert((section.clone(), u64::from_str_radix(first, 16).unwrap()));
        }
    }
    out
}

#[test]
fn nvidia_blocks_follow_the_disassembly_and_nvdisasm_bbcfg() {
    let bin = nvidia_bin();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cubins = Vec::new();
    for sm in ["sm_80", "sm_90"] {
        let out = d.join(format!("k_{sm}.cubin"));
        run(Command::new(bin.join("nvcc"))
            .args(["-cubin", "-arch", sm, "-o"])
            .arg(&out)
            .arg(guest("cfg_kernels.cu")));
        cubins.push((sm, out));
    }
    let brx = d.join("jump_table.cubin");
    run(Command::new(bin.join("ptxas"))
        .args(["-arch", "sm_80", "-o"])
        .arg(&brx)
        .arg(guest("jump_table.ptx")));
    cubins.push(("sm_80", brx));
    for (sm, cubin) in &cubins {
        let v = cfg_json(&[cubin], &[]);
        let ours = from_json(&v["files"][0], sm);
        let plain = run(Command::new(bin.join("nvdisasm")).arg("-c").arg(cubin));
        let reference = sass_reference(&String::from_utf8_lossy(&plain));
        assert!(reference.len() >= 7, "{}: {reference:?}", cubin.display());
        assert_eq!(ours, reference, "{}", cubin.display());
        let dot = run(Command::new(bin.join("nvdisasm"))
            .args(["-bbcfg", "-poff"])
            .arg(cubin));
        let drawn = bbcfg_starts(&String::from_utf8_lossy(&dot));
        let starts: BTreeSet<(String, u64)> = ours.keys().cloned().collect();
        assert_eq!(
            starts,
            drawn,
            "{}: blocks unlike nvdisasm -bbcfg's",
            cubin.display()
        );
        let kernels = v["files"][0]["kernels"].as_array().unwrap();
        let degenerate: Vec<&str> = kernels
            .iter()
            .filter(|k| k["degenerate"] == true)
            .map(|k| k["mangled"].as_str().unwrap())
            .collect();
        let jump_table = cubin.ends_with("jump_table.cubin");
        assert_eq!(
            degenerate,
            if jump_table {
                vec!["jump_table"]
            } else {
                vec![]
            }
        );
        if !jump_table {
            // Each kernel calling weigh() holds its own copy.
            let copies: Vec<&str> = kernels
                .iter()
                .filter(|k| k["mangled"] == "_Z5weighi")
                .map(|k| k["parent"].as_str().unwrap())
                .collect();
            assert_eq!(copies, vec!["branches", "loops"], "{v}");
            assert!(kernels.iter().any(|k| k["name"] == "weigh(int)"));
        }
    }
}

/// The reference CFG of AMDGPU code from plain `llvm-objdump -d`: functions from its symbol
/// headers, their trailing s_nop/s_code_end padding dropped; a block starts at a function's
/// first instruction, at every branch target and after every branch, s_endpgm, s_setpc_b64
/// and s_swappc_b64.
fn amd_reference(text: &str, kernels: &BTreeSet<String>) -> Graph {
    let mut g = Graph::new();
    let mut funcs: Vec<AmdFunction> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_suffix(">:") {
            let (addr, name) = h.split_once(" <").unwrap();
            funcs.push((
                name.to_string(),
                u64::from_str_radix(addr, 16).unwrap(),
                vec![],
            ));
        } else if let Some(body) = line.strip_prefix('\t') {
            let Some((asm, c)) = body.split_once("//") else {
                continue;
            };
            let (off, rest) = c.trim().split_once(':').unwrap();
            let words = rest.split('<').next().unwrap().split_whitespace().count() as u64;
            let text = format!(
                "{} {}",
                asm.trim(),
                rest.split_once('<').map_or("", |r| r.1)
            );
            let f = funcs.last_mut().unwrap();
            f.2.push((u64::from_str_radix(off, 16).unwrap(), 4 * words, text));
        }
    }
    let addr: BTreeMap<String, u64> = funcs.iter().map(|f| (f.0.clone(), f.1)).collect();
    for (name, _, mut insns) in funcs {
        while insns
            .last()
            .is_some_and(|i| i.2.starts_with("s_nop ") || i.2.starts_with("s_code_end"))
        {
            insns.pop();
        }
        let kernel = kernels.contains(&name);
        let target = |t: &str| -> Option<u64> {
            let t = t.trim_end_matches('>');
            let (s, o) = t.split_once("+0x").unwrap_or((t, "0"));
            Some(addr.get(s)? + u64::from_str_radix(o, 16).ok()?)
        };
        let l = Listing { insns };
        let mut leaders = BTreeSet::from([l.insns[0].0]);
        let m = |j: usize| l.insns[j].2.split_whitespace().next().unwrap().to_string();
        for j in 0..l.insns.len() {
            let mn = m(j);
            let ends = mn == "s_branch"
                || mn.starts_with("s_cbranch_")
                || mn.starts_with("s_endpgm")
                || mn == "s_setpc_b64"
                || mn == "s_swappc_b64";
            if ends && j + 1 < l.insns.len() {
                leaders.insert(l.insns[j + 1].0);
            }
            if mn == "s_branch" || mn.starts_with("s_cbranch_") {
                let t = l.insns[j].2.rsplit(' ').next().and_then(target).unwrap();
                leaders.insert(t);
            }
        }
        let edges = |j: usize| {
            let (off, size, text) = &l.insns[j];
            let next = Some(off + size);
            let mn = m(j);
            let taken = || text.rsplit(' ').next().and_then(target);
            let ret = !kernel && text.starts_with("s_setpc_b64 s[30:31]");
            match mn.as_str() {
                "s_branch" => (vec![(taken(), "taken")], true),
                _ if mn.starts_with("s_cbranch_") => {
                    (vec![(taken(), "taken"), (next, "fall-through")], true)
                }
                _ if mn.starts_with("s_endpgm") => (vec![(None, "exit")], true),
                "s_setpc_b64" if ret => (vec![(None, "return")], true),
                "s_setpc_b64" => (vec![(None, "indirect")], true),
                // The callee comes from relocations the plain listing lacks: checked apart.
                "s_swappc_b64" => (vec![(Some(u64::MAX), "call"), (next, "fall-through")], true),
                _ => (vec![(next, "fall-through")], false),
            }
        };
        reference_blocks("", &l, &leaders, edges, &mut g);
    }
    g
}

#[test]
fn amdgpu_blocks_follow_the_disassembly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (clang, objdump, arch) in [
        ("clang-16", "llvm-objdump-16", "gfx90a"),
        ("clang-16", "llvm-objdump-16", "gfx1100"),
        ("clang-19", "llvm-objdump-19", "gfx942"),
    ] {
        let obj = d.join(format!("k_{arch}.o"));
        run(Command::new(clang)
            .args(["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa"])
            .arg(format!("-mcpu={arch}"))
            .args(["-nogpulib", "-O2", "-c", "-o"])
            .arg(&obj)
            .arg(guest("cfg_kernels.cl")));
        let v = cfg_json(&[&obj], &["--llvm-objdump", objdump]);
        let file = &v["files"][0];
        assert_eq!(file["format"], "amdgpu");
        let mut ours = from_json(file, arch);
        // Calls compared by kind only here (the plain listing has no relocations).
        for (_, succ) in ours.values_mut() {
            *succ = std::mem::take(succ)
                .into_iter()
                .map(|(t, k)| {
                    if k == "call" {
                        (Some(u64::MAX), k)
                    } else {
                        (t, k)
                    }
                })
                .collect();
        }
        let syms = run(Command::new(objdump).arg("-t").arg(&obj));
        let kernels: BTreeSet<String> = String::from_utf8_lossy(&syms)
            .lines()
            .filter_map(|l| l.split_whitespace().last()?.strip_suffix(".kd"))
            .map(String::from)
            .collect();
        assert_eq!(
            kernels,
            BTreeSet::from(["loops".into(), "dense_switch".into()])
        );
        let plain = run(Command::new(objdump)
            .args(["-d", "--no-print-imm-hex"])
            .arg(&obj));
        let reference = amd_reference(&String::from_utf8_lossy(&plain), &kernels);
        assert!(reference.len() >= 20, "{arch}: {reference:?}");
        assert_eq!(ours, reference, "{arch}");
        // loops calls weigh (through the relocations before its s_swappc_b64).
        let loops = file["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["mangled"] == "loops")
            .unwrap();
        let callees: Vec<&str> = loops["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["successors"].as_array().unwrap())
            .filter_map(|e| e["callee"].as_str())
            .collect();
        assert!(callees.contains(&"weigh"), "{arch}: {callees:?}");
        assert!(file["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["arch"] == arch));
        if arch == "gfx942" {
            // Linked into a code object: the same graphs, the callee found from the address
            // the call sequence computes.
            let hsaco = d.join("k.hsaco");
            run(Command::new(clang)
                .args(["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa"])
                .args(["-mcpu=gfx942", "-nogpulib", "-O2", "-o"])
                .arg(&hsaco)
                .arg(guest("cfg_kernels.cl")));
            let linked = cfg_json(&[&hsaco], &["--llvm-objdump", objdump]);
            let strip = |v: &serde_json::Value| -> Vec<serde_json::Value> {
                let mut ks: Vec<serde_json::Value> = v["files"][0]["kernels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| serde_json::json!([k["mangled"], k["kind"], k["blocks"]]))
                    .collect();
                ks.sort_by_key(|k| k[0].to_string());
                ks
            };
            assert_eq!(strip(&linked), strip(&v));
        }
    }
}

#[test]
fn fat_binaries_and_host_objects_hold_every_architecture() {
    let bin = nvidia_bin();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gencode = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=sm_90",
    ];
    let fatbin = d.join("k.fatbin");
    run(Command::new(bin.join("nvcc"))
        .args(gencode)
        .args(["-fatbin", "-Xfatbin", "-compress-all", "-o"])
        .arg(&fatbin)
        .arg(guest("cfg_kernels.cu")));
    let object = d.join("k.o");
    run(Command::new(bin.join("nvcc"))
        .args(gencode)
        .args(["-c", "-o"])
        .arg(&object)
        .arg(guest("cfg_kernels.cu")));
    let cubin = d.join("k.cubin");
    run(Command::new(bin.join("nvcc"))
        .args(["-cubin", "-arch", "sm_90", "-o"])
        .arg(&cubin)
        .arg(guest("cfg_kernels.cu")));
    let v = cfg_json(&[&fatbin, &object, &cubin], &[]);
    let single = from_json(&v["files"][2], "sm_90");
    for (i, format) in [(0, "fatbin"), (1, "host-elf")] {
        let f = &v["files"][i];
        assert_eq!(f["format"], format);
        let archs: BTreeSet<&str> = f["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["arch"].as_str().unwrap())
            .collect();
        assert_eq!(archs, BTreeSet::from(["sm_80", "sm_90"]));
        assert_eq!(from_json(f, "sm_90"), single, "{format}");
    }
    // The other formats carry the same blocks.
    let tsv = run(bbv().args(["gpu", "cfg", "--format", "tsv"]).arg(&cubin));
    let rows = String::from_utf8_lossy(&tsv).lines().count() - 1;
    assert_eq!(rows, single.len());
    let dot = run(bbv().args(["gpu", "cfg", "--format", "dot"]).arg(&cubin));
    let dot = String::from_utf8_lossy(&dot);
    assert!(dot.starts_with("digraph cfg {"), "{dot}");
    assert_eq!(dot.matches(" instructions\\n").count(), single.len());
}

#[test]
fn bad_inputs_are_refused_and_nothing_is_written() {
    let bin = nvidia_bin();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = d.join("notes.txt");
    std::fs::write(&text, "not a binary\n").unwrap();
    let cubin = d.join("k.cubin");
    run(Command::new(bin.join("nvcc"))
        .args(["-cubin", "-arch", "sm_80", "-o"])
        .arg(&cubin)
        .arg(guest("cfg_kernels.cu")));
    // A cubin for an architecture nvdisasm does not know (its SM number patched to 7).
    let mut bytes = std::fs::read(&cubin).unwrap();
    let flags = u32::from_le_bytes(bytes[48..52].try_into().unwrap());
    bytes[48..52].copy_from_slice(&((flags & !0xff00) | (7 << 8)).to_le_bytes());
    let alien = d.join("alien.cubin");
    std::fs::write(&alien, &bytes).unwrap();
    let fatbin = d.join("k.fatbin");
    run(Command::new(bin.join("nvcc"))
        .args(["-fatbin", "-arch", "sm_80", "-o"])
        .arg(&fatbin)
        .arg(guest("cfg_kernels.cu")));
    let whole = std::fs::read(&fatbin).unwrap();
    let truncated = d.join("truncated.fatbin");
    std::fs::write(&truncated, &whole[..whole.len() / 2]).unwrap();
    let host = d.join("plain.o");
    run(Command::new("cc")
        .args(["-c", "-x", "c", "-o"])
        .arg(&host)
        .arg("/dev/null"));
    let out = d.join("cfg.json");
    std::fs::write(&out, "earlier\n").unwrap();
    // Disassemblers that print nothing, or a listing that is not nvdisasm's, exit 0.
    let silent = d.join("silent-nvdisasm");
    let junk = d.join("junk-nvdisasm");
    for (fake, body) in [
        (&silent, ""),
        (&junk, "echo '.target sm_80'; echo 'garbage'"),
    ] {
        std::fs::write(fake, format!("#!/bin/sh\n{body}\n")).unwrap();
        let mut p = std::fs::metadata(fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        std::fs::set_permissions(fake, p).unwrap();
    }
    let cases: Vec<(Vec<PathBuf>, Vec<&str>, &str)> = vec![
        (
            vec![cubin.clone()],
            vec!["--nvdisasm", silent.to_str().unwrap()],
            "silent-nvdisasm printed no code for 3 of its kernel sections",
        ),
        (
            vec![cubin.clone()],
            vec!["--nvdisasm", junk.to_str().unwrap()],
            "printed no code for 3 of its kernel sections",
        ),
        (
            vec![text.clone()],
            vec![],
            "not an ELF file or a CUDA fat binary",
        ),
        (
            vec![cubin.clone(), alien.clone()],
            vec![],
            "alien.cubin: nvdisasm refused it",
        ),
        (
            vec![truncated.clone()],
            vec![],
            "truncated.fatbin: cuobjdump refused it",
        ),
        (vec![host.clone()], vec![], "without CUDA device code"),
        (vec![d.join("missing.cubin")], vec![], "missing.cubin"),
        (
            vec![cubin.clone()],
            vec!["--nvdisasm", "/nonexistent/nvdisasm"],
            "cannot run /nonexistent/nvdisasm",
        ),
    ];
    for (files, extra, message) in cases {
        let o = bbv()
            .args(["gpu", "cfg", "-o"])
            .arg(&out)
            .args(extra)
            .args(&files)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{files:?}: {err}");
        assert!(err.contains(message), "{files:?}: {err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier\n");
    }
    // $BBV_NVDISASM is honoured here as by `bbv gpu run` (one lookup); --nvdisasm wins over it.
    let with_env = |extra: &[&str]| {
        bbv()
            .env("BBV_NVDISASM", "/nonexistent/env-nvdisasm")
            .args(["gpu", "cfg", "-o"])
            .arg(&out)
            .args(extra)
            .arg(&cubin)
            .output()
            .unwrap()
    };
    let o = with_env(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot run /nonexistent/env-nvdisasm"),
        "{err}"
    );
    let given = bin.join("nvdisasm");
    let o = with_env(&["--nvdisasm", given.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A kernel's static blocks from bbv's JSON: (section offset, opcodes), in address order.
fn kernel_blocks(v: &serde_json::Value, kernel: &str) -> Vec<(u64, Vec<String>)> {
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for f in v["files"][0]["kernels"].as_array().unwrap() {
        if f["mangled"] != kernel && f["parent"] != kernel {
            continue;
        }
        for b in f["blocks"].as_array().unwrap() {
            let ops = b["opcodes"].as_array().unwrap();
            let ops = ops
                .iter()
                .map(|o| o.as_str().unwrap().to_string())
                .collect();
            out.push((
                f["offset"].as_u64().unwrap() + b["start"].as_u64().unwrap(),
                ops,
            ));
        }
    }
    out.sort();
    out
}

/// cfg_kernels.cu compiled for sm_90 in `d`, and bbv's JSON of it.
fn sm90_cubin(d: &Path) -> (PathBuf, serde_json::Value) {
    let cubin = d.join("k.cubin");
    run(Command::new(nvidia_bin().join("nvcc"))
        .args(["-cubin", "-arch", "sm_90", "-o"])
        .arg(&cubin)
        .arg(guest("cfg_kernels.cu")));
    let v = cfg_json(&[&cubin], &[]);
    (cubin, v)
}

/// One launch of `kernel` (sm_90) in Accel-Sim's format: one warp running `pcs` in order.
fn trace(kernel: &str, pcs: &[(u64, String)]) -> String {
    let mut t = format!(
        "-kernel name = {kernel}\n-kernel id = 1\n-grid dim = (1,1,1)\n-block dim = (32,1,1)\n\
         -shmem = 0\n-nregs = 8\n-binary version = 90\n-cuda stream id = 0\n\
         -nvbit version = 1.7\n-accelsim tracer version = 4\n-enable lineinfo = 0\n\n\
         #BEGIN_TB\n\nthread block = 0,0,0\n\nwarp = 0\ninsts = {}\n",
        pcs.len()
    );
    for (pc, op) in pcs {
        t.push_str(&format!("{pc:04x} ffffffff 0 {op} 0 0 \n"));
    }
    t.push_str("\n#END_TB\n");
    t
}

#[test]
fn traces_map_onto_static_blocks_and_disagreements_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (cubin, v) = sm90_cubin(d);
    let walk = |blocks: &[(u64, Vec<String>)]| -> Vec<(u64, String)> {
        blocks
            .iter()
            .flat_map(|(s, ops)| {
                ops.iter()
                    .enumerate()
                    .map(move |(i, o)| (s + 16 * i as u64, o.clone()))
            })
            .collect()
    };
    // loops: every static block once, in address order.
    let loops = kernel_blocks(&v, "loops");
    assert!(loops.len() > 10);
    std::fs::write(d.join("kernel-1.traceg"), trace("loops", &walk(&loops))).unwrap();
    // branches: every block, then a PC inside no block and a jump into a block's middle.
    let branches = kernel_blocks(&v, "branches");
    let mut pcs = walk(&branches);
    let end = pcs.last().unwrap().0 + 16;
    pcs.push((end + 0x100, "NOP".into()));
    let long = branches.iter().find(|b| b.1.len() >= 2).unwrap();
    pcs.push((long.0 + 16, long.1[1].clone()));
    std::fs::write(d.join("kernel-2.traceg"), trace("branches", &pcs)).unwrap();
    let list = d.join("kernelslist.g");
    std::fs::write(&list, "kernel-1.traceg\nkernel-2.traceg\n").unwrap();
    let prefix = d.join("out");
    let o = bbv()
        .args(["gpu", "bbv"])
        .arg(&list)
        .arg("-o")
        .arg(&prefix)
        .arg("--cfg")
        .arg(&cubin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "loops (sm_90): {} static blocks from the binary",
            loops.len()
        )),
        "{err}"
    );
    assert!(
        err.contains("branches (sm_90): the trace disagrees with the binary (1 PCs inside no static block, 1 blocks entered in their middle)"),
        "{err}"
    );
    // loops' blocks are the binary's, each run once with all its instructions.
    let table = std::fs::read_to_string(prefix.with_extension("blocks")).unwrap();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split(' ').collect())
        .filter(|r: &Vec<&str>| r[1] == "loops")
        .collect();
    let expected: Vec<(String, String, String)> = loops
        .iter()
        .map(|(s, ops)| (format!("0x{s:04x}"), ops.len().to_string(), "1".to_string()))
        .collect();
    let got: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r[2].to_string(), r[3].to_string(), r[4].to_string()))
        .collect();
    assert_eq!(got, expected);
    let bb = std::fs::read_to_string(prefix.with_extension("bb")).unwrap();
    let first = bb.lines().find(|l| l.starts_with('T')).unwrap();
    let counts: Vec<(u32, u64)> = first
        .trim_start_matches('T')
        .split_whitespace()
        .map(|c| {
            let mut p = c.trim_start_matches(':').split(':');
            (
                p.next().unwrap().parse().unwrap(),
                p.next().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let ids: Vec<(u32, u64)> = rows
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[3].parse().unwrap()))
        .collect();
    assert_eq!(counts, ids, "launch 1's vector: each block's instructions");
}

#[test]
fn per_block_counts_name_every_static_block_and_the_skipped_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (cubin, v) = sm90_cubin(d);
    let loops = kernel_blocks(&v, "loops");
    assert!(loops.len() > 10);
    // Block i runs i % 3 times: a third of the blocks are skipped, the others entered once or
    // twice, each time from its first instruction to its last.
    let mut pcs = Vec::new();
    for (i, (start, ops)) in loops.iter().enumerate() {
        for _ in 0..i % 3 {
            pcs.extend(
                ops.iter()
                    .enumerate()
                    .map(|(j, o)| (start + 16 * j as u64, o.clone())),
            );
        }
    }
    std::fs::write(d.join("kernel-1.traceg"), trace("loops", &pcs)).unwrap();
    let list = d.join("kernelslist.g");
    std::fs::write(&list, "kernel-1.traceg\n").unwrap();
    let o = bbv()
        .args(["gpu", "count", "--format", "json", "--per-block"])
        .arg(&list)
        .arg("--cfg")
        .arg(&cubin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "loops (sm_90): {} static blocks from the binary",
            loops.len()
        )),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let launch = &doc["launches"][0];
    assert_eq!(launch["count"].as_u64().unwrap(), pcs.len() as u64);
    let got: Vec<(u64, u64, u64)> = launch["basic_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let f = |k: &str| b[k].as_u64().unwrap();
            (f("start"), f("instructions"), f("executions"))
        })
        .collect();
    let expected: Vec<(u64, u64, u64)> = loops
        .iter()
        .enumerate()
        .map(|(i, (s, ops))| (*s, ops.len() as u64, (i % 3) as u64))
        .collect();
    assert_eq!(got, expected);
    // NVBit's layout: a line per block under the launch's line.
    let o = bbv()
        .args(["gpu", "count", "--per-block"])
        .arg(&list)
        .arg("--cfg")
        .arg(&cubin)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("  block ")).collect();
    assert_eq!(lines.len(), loops.len(), "{text}");
    let (s, ops) = &loops[2];
    assert!(
        text.contains(&format!(
            "  block 3 at 0x{s:04x}: {} instructions, executed 2\n",
            ops.len()
        )),
        "{text}"
    );
    // Options that contradict each other are refused before anything is read.
    for (args, message) in [
        (vec!["--cfg", "x.cubin"], "give --per-block with it"),
        (
            vec!["--per-block", "--format", "csv"],
            "not in Accel-Sim's csv",
        ),
        (vec!["--per-block", "--keep-going"], "cannot skip launches"),
    ] {
        let o = bbv()
            .args(["gpu", "count"])
            .arg(&list)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}
