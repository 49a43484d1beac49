//! Translation-time analysis of a TB and the global block table.

use bbv_plugin_contract::blocks as contract;
use bbv_plugin_contract::files;
use bbv_plugin_contract::Isa;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::ffi::Insn;
use crate::maplog::MapLog;
use crate::{report_error, Config};
use bbv_branch::x86;
use bbv_guest::maps;

/// What the execution callback needs about one translated block. Leaked: QEMU may run the
/// translated code until exit, and TBs are few compared with their executions.
pub struct TbInfo {
    /// Block id (1-based, in first-translation order).
    pub id: u32,
    /// Instructions counted per execution.
    pub insns: u64,
    /// Guest address of the first instruction.
    pub pc: u64,
    /// Guest address just past the last counted instruction (where execution falls through).
    pub end: u64,
    /// Where the last instruction is if it is a conditional branch, else 0: its offset in its
    /// file (its address in anonymous code). Not its address: QEMU 9+ loads libraries at
    /// randomized addresses, like the kernel, and the metrics' branch predictor, indexed by it,
    /// would then mispredict differently on every run.
    pub branch: u64,
    /// The first instruction is a `rep` string instruction (x86).
    pub rep_first: bool,
    /// Address of the last instruction if it is a `rep` string instruction, else 0.
    pub rep_last: u64,
    /// `fldcw` instructions in the block.
    pub fldcw: u64,
    /// Executions counted by the single-thread fast path (a slot in `tbs.state`).
    pub execs: *mut u64,
    /// That slot's index (API v3 also counts it in a scoreboard entry).
    #[cfg_attr(feature = "api-v1", allow(dead_code))]
    pub slot: u32,
    /// The block may close a loop or leave a function (interval boundaries are checked there
    /// when counting inline); true when unknown.
    pub may_loop: bool,
    /// In the program's own code (not the loader, a language runtime, an excluded library or
    /// anonymous memory): multi-threaded slices end only at such blocks.
    pub own: bool,
    /// In an excluded library (`exclude=`, OpenMP runtimes by default): its instructions do
    /// not count toward slices.
    pub excluded: bool,
    /// Starts at a loop head (the target of a backward branch seen so far); set when the
    /// branch is translated, which may be after this block.
    pub head: AtomicBool,
}

// SAFETY: `execs` points into a mapping that lives until exit; see fast.rs for who writes it.
unsafe impl Sync for TbInfo {}
unsafe impl Send for TbInfo {}

/// Module index used for code that is not in a mapped file; such blocks are keyed by address.
const ANON: u32 = u32::MAX;

/// What makes two translations of a block count the same way.
type Variant = (u32, u64, bool, u64, u64, bool, u64);

struct Table {
    ids: HashMap<(u32, u64), u32>,
    /// Every (id, instructions) translated so far: a block retranslated with another length
    /// gets a `size` line, so the host knows its executions cannot be read off its counts.
    sizes: HashSet<(u32, u64)>,
    /// One TbInfo (and fast-path slot) per variant, shared by retranslations.
    infos: HashMap<Variant, &'static TbInfo>,
    /// Loop heads found so far (guest addresses), and the blocks starting at each address.
    heads: HashSet<u64>,
    by_pc: HashMap<u64, Vec<&'static TbInfo>>,
    next: u32,
    /// Module lines written so far.
    modules: usize,
    /// `DIR/blocks` (whole lines, even when the process is killed).
    file: Option<MapLog>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn append(table: &mut Table, line: &str) {
    if let Some(f) = &mut table.file {
        if let Err(e) = f.append(line.as_bytes()) {
            report_error(&format!("writing the block table: {e}"));
            table.file = None;
        }
    }
}

/// Creates `DIR/blocks` (at install time, so the host can tell the plugin was loaded).
pub fn init(cfg: &Config) -> std::io::Result<()> {
    let file = MapLog::create(&cfg.host.dir.join(files::BLOCKS))?;
    *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Table {
        ids: HashMap::new(),
        sizes: HashSet::new(),
        infos: HashMap::new(),
        heads: HashSet::new(),
        by_pc: HashMap::new(),
        next: 1,
        modules: 0,
        file: Some(file),
    });
    Ok(())
}

/// The block's id, first seen now or before; a first translation, or one with another
/// length, is appended to the block table.
fn block_id(
    table: &mut Table,
    key: (u32, u64),
    address: u64,
    insns: u64,
    bytes: u64,
    rep_first: bool,
) -> u32 {
    let id = match table.ids.get(&key) {
        Some(&id) => id,
        None => {
            let id = table.next;
            table.next += 1;
            table.ids.insert(key, id);
            let mut line = String::new();
            if key.0 != ANON && key.0 as usize >= table.modules {
                let paths = maps::paths();
                for (i, p) in paths.iter().enumerate().skip(table.modules) {
                    contract::write_module(&mut line, i, p);
                }
                table.modules = paths.len();
            }
            let entry = contract::BlockLine {
                id,
                module: (key.0 != ANON).then_some(key.0),
                offset: key.1,
                address,
                instructions: insns,
                bytes,
                rep: rep_first,
            };
            contract::write_block(&mut line, &entry);
            table.sizes.insert((id, insns));
            append(table, &line);
            id
        }
    };
    if table.sizes.insert((id, insns)) {
        let mut line = String::new();
        contract::write_size(&mut line, id, insns, bytes);
        append(table, &line);
    }
    id
}

/// What a TB's instructions say, decoded for the guest's ISA.
struct Facts {
    /// Instructions counted (a stale page-crossing copy left out).
    insns: usize,
    /// It ends in a conditional branch.
    cond: bool,
    /// It starts with a rep string instruction.
    rep_first: bool,
    /// The address of a rep string instruction ending it (0 when none).
    rep_last: u64,
    /// fldcw instructions in it.
    fldcw: u64,
    /// It may jump back into itself or its own start.
    may_loop: bool,
    /// The end of the counted instructions' bytes.
    end: u64,
}

fn facts<'a>(
    cfg: &Config,
    n: usize,
    first: &Insn<'a>,
    last: &Insn<'a>,
    insn: &impl Fn(usize) -> Insn<'a>,
) -> Facts {
    let mut insns = n;
    // QEMU 7.2 keeps a truncated stale copy of an instruction that crosses a page boundary when
    // it is not first in its TB (translation restarts without it, the plugin's list keeps it),
    // so it would be counted here and again at the start of the next TB.
    if n > 1 && 4096 - (last.vaddr & 4095) <= 15 {
        let d = last.disas();
        if d.contains(".byte") || d.contains("(bad)") {
            insns -= 1;
        }
    }
    let (mut rep_first, mut rep_last, mut fldcw, mut may_loop) = (false, 0, 0, true);
    let cond = if insns != n {
        false
    } else if cfg.x86 {
        x86::is_cond_branch(last.bytes)
    } else if cfg.is(Isa::Aarch64) {
        bbv_branch::decode::aarch64_is_cond_branch(last.bytes)
    } else {
        cfg.is(Isa::Riscv64) && bbv_branch::decode::riscv64_is_cond_branch(last.bytes)
    };
    if cfg.x86 {
        rep_first = x86::is_rep_string(first.bytes);
        if insns == n && x86::is_rep_string(last.bytes) {
            rep_last = last.vaddr;
        }
        fldcw = (0..insns).filter(|&i| x86::is_fldcw(insn(i).bytes)).count() as u64;
        may_loop = x86::may_loop(last.bytes) || insns != n;
    } else if cfg.is(Isa::Aarch64) {
        may_loop = bbv_branch::decode::aarch64_may_loop(last.bytes) || insns != n;
    } else if cfg.is(Isa::Riscv64) {
        may_loop = bbv_branch::decode::riscv64_may_loop(last.bytes) || insns != n;
    }
    // The counted instructions' byte span: blocks whose span covers another block's first
    // instruction run that instruction too (a marker's count must include such executions).
    let end = {
        let l = insn(insns - 1);
        l.vaddr + l.bytes.len() as u64
    };
    Facts {
        insns,
        cond,
        rep_first,
        rep_last,
        fldcw,
        may_loop,
        end,
    }
}

/// Analyzes a TB being translated: instructions to count, rep/fldcw facts and the block id.
pub fn analyze<'a>(
    cfg: &Config,
    n: usize,
    haddr: u64,
    insn: impl Fn(usize) -> Insn<'a>,
) -> Option<&'static TbInfo> {
    let first = insn(0);
    let last = insn(n - 1);
    let Facts {
        insns,
        cond,
        rep_first,
        rep_last,
        fldcw,
        may_loop,
        end,
    } = facts(cfg, n, &first, &last, &insn);
    let bytes = end.saturating_sub(first.vaddr);
    let key = maps::locate(haddr).unwrap_or((ANON, first.vaddr));
    // Loop heads and image kinds serve slicing only.
    let slicing = cfg.host.slices > 0;
    let back = match (slicing, cfg.x86, cfg.is(Isa::Aarch64)) {
        (true, true, _) => x86::backward_target(last.bytes, last.vaddr),
        (true, _, true) => bbv_branch::decode::aarch64_backward_target(last.bytes, last.vaddr),
        _ => None,
    };
    // Flow control lets threads in excluded libraries (spinning at a barrier) run unpaced, and
    // turns end sooner there.
    let name = ((slicing || cfg.host.flow > 0 || cfg.host.turns > 0) && key.0 != ANON)
        .then(|| maps::file_name(key.0))
        .flatten();
    let (own, excluded) = match name {
        Some(name) => {
            let excluded = bbv_profile::image_matches(&name, &cfg.host.exclude);
            let own = !excluded && bbv_profile::image_kind(&name) == bbv_profile::ImageKind::Own;
            (own, excluded)
        }
        None => (false, false),
    };
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let table = guard.as_mut()?;
    let id = block_id(table, key, first.vaddr, insns as u64, bytes, rep_first);
    if let Some(target) = back.filter(|_| own) {
        if table.heads.insert(target) {
            for info in table.by_pc.get(&target).into_iter().flatten() {
                info.head.store(true, Ordering::Relaxed);
            }
        }
    }
    // The address is part of the variant: a module mapped twice runs the same block at two
    // addresses, with two fall-through addresses.
    let variant = (
        id,
        insns as u64,
        rep_first,
        rep_last,
        fldcw,
        may_loop,
        first.vaddr,
    );
    if let Some(info) = table.infos.get(&variant) {
        return Some(info);
    }
    // Without a branch decoder for the target, every block of the program's own code counts
    // as a loop head (slices then end at the first such block after the budget).
    let decoded = cfg.x86 || cfg.is(Isa::Aarch64);
    let (execs, slot) = crate::fast::new_slot(id, insns as u64, fldcw)?;
    let info: &'static TbInfo = Box::leak(Box::new(TbInfo {
        id,
        insns: insns as u64,
        pc: first.vaddr,
        end,
        branch: match (cond, key.0) {
            (false, _) => 0,
            (true, ANON) => last.vaddr,
            // Never 0: a file's first bytes are its header, not code.
            (true, _) => (key.1 + (last.vaddr - first.vaddr)).max(1),
        },
        rep_first,
        rep_last,
        fldcw,
        execs,
        slot,
        may_loop,
        own,
        excluded,
        head: AtomicBool::new(!decoded || table.heads.contains(&first.vaddr)),
    }));
    table.infos.insert(variant, info);
    table.by_pc.entry(first.vaddr).or_default().push(info);
    Some(info)
}
