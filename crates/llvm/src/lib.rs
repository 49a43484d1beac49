//! bbv-llvm: an LLVM 14 new-pass-manager plugin that makes instruction counts deterministic.
//!
//! `opt-14 -load-pass-plugin=libbbv_llvm.so -passes='bbv-total,verify'` (or `bbv-blocks`) adds, at
//! the start of every basic block, the block's IR instruction count to a per-function
//! accumulator, flushed into the calling thread's counter (`__bbv_tls[0]`, defined by the
//! runtime) before calls, returns and resumes, and compared with the thread's limit
//! (`__bbv_tls[1]`) at function entries and loop heads, calling `bbv_budget_hit(site)` when it
//! is passed. `bbv-blocks` also counts
//! each block's executions in a per-module array the runtime finds through the `bbv_modules`
//! section, for per-block counts and BBV intervals. `bbv-count` counts as `bbv-total` but never
//! compares with the limit (no budgets), and marks the module so that the runtime refuses budgets.
//!
//! # Design constraints
//! * Run on the frontend's IR before any optimisation (`bbv cc` fixes the frontend flags), so the
//!   same source gives the same counts at every -O level, `-march` and run.
//! * A block's count is its instruction count before instrumentation, debug intrinsics excluded
//!   (so `-g` changes nothing); it is added when the block is entered, so a block left early
//!   (longjmp, an exception, exit) counts in full.
//! * No control flow is changed here: the check lives in an `alwaysinline` helper and the
//!   inliner (which runs at every -O level, -O0 included) splits the blocks.
//! * Only the LLVM C API, so the pass ports to newer LLVMs unchanged.

use std::ffi::{CStr, CString};

use llvm_plugin::inkwell::llvm_sys::core::*;
use llvm_plugin::inkwell::llvm_sys::prelude::*;
use llvm_plugin::inkwell::llvm_sys::{LLVMLinkage, LLVMOpcode, LLVMThreadLocalMode};
use llvm_plugin::inkwell::module::Module;
use llvm_plugin::{
    LlvmModulePass, ModuleAnalysisManager, PassBuilder, PipelineParsing, PreservedAnalyses,
};

#[llvm_plugin::plugin(name = "bbv", version = "0.1")]
fn plugin_registrar(builder: &mut PassBuilder) {
    builder.add_module_pipeline_parsing_callback(|name, manager| match name {
        "bbv-total" => {
            manager.add_pass(Instrument {
                blocks: false,
                checks: true,
            });
            PipelineParsing::Parsed
        }
        "bbv-blocks" => {
            manager.add_pass(Instrument {
                blocks: true,
                checks: true,
            });
            PipelineParsing::Parsed
        }
        "bbv-count" => {
            manager.add_pass(Instrument {
                blocks: false,
                checks: false,
            });
            PipelineParsing::Parsed
        }
        _ => PipelineParsing::NotParsed,
    });
}

struct Instrument {
    blocks: bool,
    /// Compare with the limit at function entries and loop heads (budgets, BBV cuts).
    checks: bool,
}

impl LlvmModulePass for Instrument {
    fn run_pass(&self, module: &mut Module, _m: &ModuleAnalysisManager) -> PreservedAnalyses {
        // SAFETY: the module handle is valid for the duration of the pass.
        unsafe { instrument(module.as_mut_ptr(), self.blocks, self.checks) };
        PreservedAnalyses::None
    }
}

fn c(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

/// IR instructions of a block as counted: everything but debug intrinsics.
unsafe fn counted(block: LLVMBasicBlockRef) -> u64 {
    let mut n = 0;
    let mut i = LLVMGetFirstInstruction(block);
    while !i.is_null() {
        if !is_debug_intrinsic(i) {
            n += 1;
        }
        i = LLVMGetNextInstruction(i);
    }
    n
}

unsafe fn is_debug_intrinsic(i: LLVMValueRef) -> bool {
    if LLVMGetInstructionOpcode(i) != LLVMOpcode::LLVMCall {
        return false;
    }
    let callee = LLVMGetCalledValue(i);
    if callee.is_null() || LLVMIsAFunction(callee).is_null() {
        return false;
    }
    let mut len = 0;
    let name = LLVMGetValueName2(callee, &mut len);
    !name.is_null() && CStr::from_ptr(name).to_bytes().starts_with(b"llvm.dbg.")
}

/// Where counting code may go: after PHIs and the exception-handling pad a block must start
/// with. None for blocks that may hold nothing else (catchswitch).
unsafe fn insertion_point(block: LLVMBasicBlockRef) -> Option<LLVMValueRef> {
    let mut i = LLVMGetFirstInstruction(block);
    while !i.is_null() {
        match LLVMGetInstructionOpcode(i) {
            LLVMOpcode::LLVMPHI
            | LLVMOpcode::LLVMLandingPad
            | LLVMOpcode::LLVMCatchPad
            | LLVMOpcode::LLVMCleanupPad => i = LLVMGetNextInstruction(i),
            LLVMOpcode::LLVMCatchSwitch => return None,
            _ => return Some(i),
        }
    }
    None
}

/// (file, line) of the block's first instruction that has a debug location.
unsafe fn location(block: LLVMBasicBlockRef) -> (String, u32) {
    let mut i = LLVMGetFirstInstruction(block);
    while !i.is_null() {
        let line = LLVMGetDebugLocLine(i);
        if line > 0 {
            let mut len = 0;
            let f = LLVMGetDebugLocFilename(i, &mut len);
            let file = if f.is_null() {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(f as *const u8, len as usize))
                    .into_owned()
            };
            return (file, line);
        }
        i = LLVMGetNextInstruction(i);
    }
    (String::new(), 0)
}

struct Strings {
    module: LLVMModuleRef,
    ctx: LLVMContextRef,
    cache: std::collections::HashMap<String, LLVMValueRef>,
}

impl Strings {
    /// A pointer (i8*) to a private constant C string, one global per distinct string.
    unsafe fn get(&mut self, s: &str) -> LLVMValueRef {
        if let Some(&v) = self.cache.get(s) {
            return v;
        }
        let bytes = c(s);
        let init = LLVMConstStringInContext(self.ctx, bytes.as_ptr(), s.len() as u32, 0);
        let g = LLVMAddGlobal(self.module, LLVMTypeOf(init), c("__bbv_str").as_ptr());
        LLVMSetInitializer(g, init);
        LLVMSetGlobalConstant(g, 1);
        LLVMSetLinkage(g, LLVMLinkage::LLVMPrivateLinkage);
        LLVMSetUnnamedAddress(
            g,
            llvm_plugin::inkwell::llvm_sys::LLVMUnnamedAddr::LLVMGlobalUnnamedAddr,
        );
        let i8p = LLVMPointerType(LLVMInt8TypeInContext(self.ctx), 0);
        let v = LLVMConstBitCast(g, i8p);
        self.cache.insert(s.to_string(), v);
        v
    }
}

/// Whether `f` is a copy of a function defined elsewhere that only -O1 and up would inline
/// (available_externally and not always_inline: glibc's `extern inline` atoi, C++'s extern
/// templates). At -O0 such a body is dropped and the call reaches the outside definition, so
/// counting the body when inlined made -O1..-Os count more than -O0 (6 for an atoi). It is made
/// noinline instead, so that every level calls the outside definition, and is not counted.
/// Always-inline copies (glibc's fortify wrappers) are inlined at every level and counted.
unsafe fn external_copy(ctx: LLVMContextRef, f: LLVMValueRef) -> bool {
    if LLVMGetLinkage(f) != LLVMLinkage::LLVMAvailableExternallyLinkage {
        return false;
    }
    let kind = |name: &str| LLVMGetEnumAttributeKindForName(name.as_ptr() as *const i8, name.len());
    if !LLVMGetEnumAttributeAtIndex(f, u32::MAX, kind("alwaysinline")).is_null() {
        return false;
    }
    LLVMRemoveEnumAttributeAtIndex(f, u32::MAX, kind("inlinehint"));
    LLVMAddAttributeAtIndex(
        f,
        u32::MAX,
        LLVMCreateEnumAttribute(ctx, kind("noinline"), 0),
    );
    true
}

unsafe fn instrument(m: LLVMModuleRef, blocks_mode: bool, checks: bool) {
    if !LLVMGetNamedGlobal(m, c("__bbv_tls").as_ptr()).is_null()
        && !LLVMGetNamedFunction(m, c("__bbv_count").as_ptr()).is_null()
    {
        return; // instrumented already
    }
    let ctx = LLVMGetModuleContext(m);
    let i8t = LLVMInt8TypeInContext(ctx);
    let i32t = LLVMInt32TypeInContext(ctx);
    let i64t = LLVMInt64TypeInContext(ctx);
    let i8p = LLVMPointerType(i8t, 0);
    let void = LLVMVoidTypeInContext(ctx);

    // The runtime's thread-local [count, limit].
    let tls_ty = LLVMArrayType(i64t, 2);
    let tls = LLVMAddGlobal(m, tls_ty, c("__bbv_tls").as_ptr());
    LLVMSetThreadLocal(tls, 1);
    LLVMSetThreadLocalMode(tls, LLVMThreadLocalMode::LLVMInitialExecTLSModel);
    LLVMSetLinkage(tls, LLVMLinkage::LLVMExternalLinkage);

    // struct bbv_site { const char *function, *file; uint32_t line, insns; }
    let mut fields = [i8p, i8p, i32t, i32t];
    let site_ty = LLVMStructTypeInContext(ctx, fields.as_mut_ptr(), 4, 0);
    let site_p = LLVMPointerType(site_ty, 0);

    let mut hit_args = [site_p];
    let hit_ty = LLVMFunctionType(void, hit_args.as_mut_ptr(), 1, 0);
    let hit = LLVMAddFunction(m, c("bbv_budget_hit").as_ptr(), hit_ty);

    // Counting runs in a per-function accumulator (an alloca that mem2reg turns into a
    // register): each block adds its count to it; it is flushed into the thread's counter
    // before every call, return and resume (so nothing pending is lost when a callee never
    // returns: longjmp, exceptions, exit), and checked against the limit at function entry and
    // at every target of a backward edge in block order (every cycle has one), so a budget
    // stops a run at the same check point every time.
    let i64p = LLVMPointerType(i64t, 0);
    let attrs = |f: LLVMValueRef| {
        for attr in ["alwaysinline", "nounwind"] {
            let kind = LLVMGetEnumAttributeKindForName(attr.as_ptr() as *const i8, attr.len());
            LLVMAddAttributeAtIndex(f, u32::MAX, LLVMCreateEnumAttribute(ctx, kind, 0));
        }
        LLVMSetLinkage(f, LLVMLinkage::LLVMInternalLinkage);
    };
    let b = LLVMCreateBuilderInContext(ctx);
    let zero32 = LLVMConstInt(i32t, 0, 0);
    let one32 = LLVMConstInt(i32t, 1, 0);
    let zero64 = LLVMConstInt(i64t, 0, 0);
    // void __bbv_flush(i64 *acc): count += *acc; *acc = 0.
    let mut flush_args = [i64p];
    let flush_ty = LLVMFunctionType(void, flush_args.as_mut_ptr(), 1, 0);
    let flush_fn = LLVMAddFunction(m, c("__bbv_flush").as_ptr(), flush_ty);
    attrs(flush_fn);
    {
        let entry = LLVMAppendBasicBlockInContext(ctx, flush_fn, c("entry").as_ptr());
        LLVMPositionBuilderAtEnd(b, entry);
        let mut idx0 = [zero32, zero32];
        let pc = LLVMBuildInBoundsGEP2(b, tls_ty, tls, idx0.as_mut_ptr(), 2, c("pc").as_ptr());
        let acc = LLVMGetParam(flush_fn, 0);
        let v = LLVMBuildLoad2(b, i64t, acc, c("v").as_ptr());
        let cnt = LLVMBuildLoad2(b, i64t, pc, c("c").as_ptr());
        LLVMBuildStore(b, LLVMBuildAdd(b, cnt, v, c("s").as_ptr()), pc);
        LLVMBuildStore(b, zero64, acc);
        LLVMBuildRetVoid(b);
    }
    // void __bbv_count(i64 *acc, i64 n, site*): count += *acc + n; *acc = 0;
    // if (count > limit) bbv_budget_hit(site).
    let mut count_args = [i64p, i64t, site_p];
    let count_ty = LLVMFunctionType(void, count_args.as_mut_ptr(), 3, 0);
    let count_fn = LLVMAddFunction(m, c("__bbv_count").as_ptr(), count_ty);
    attrs(count_fn);
    {
        let entry = LLVMAppendBasicBlockInContext(ctx, count_fn, c("entry").as_ptr());
        let over = LLVMAppendBasicBlockInContext(ctx, count_fn, c("over").as_ptr());
        let done = LLVMAppendBasicBlockInContext(ctx, count_fn, c("done").as_ptr());
        LLVMPositionBuilderAtEnd(b, entry);
        let mut idx0 = [zero32, zero32];
        let mut idx1 = [zero32, one32];
        let pc = LLVMBuildInBoundsGEP2(b, tls_ty, tls, idx0.as_mut_ptr(), 2, c("pc").as_ptr());
        let pl = LLVMBuildInBoundsGEP2(b, tls_ty, tls, idx1.as_mut_ptr(), 2, c("pl").as_ptr());
        let acc = LLVMGetParam(count_fn, 0);
        let v = LLVMBuildLoad2(b, i64t, acc, c("v").as_ptr());
        let v = LLVMBuildAdd(b, v, LLVMGetParam(count_fn, 1), c("vn").as_ptr());
        LLVMBuildStore(b, zero64, acc);
        let cnt = LLVMBuildLoad2(b, i64t, pc, c("c").as_ptr());
        let sum = LLVMBuildAdd(b, cnt, v, c("s").as_ptr());
        LLVMBuildStore(b, sum, pc);
        let lim = LLVMBuildLoad2(b, i64t, pl, c("l").as_ptr());
        let cmp = LLVMBuildICmp(
            b,
            llvm_plugin::inkwell::llvm_sys::LLVMIntPredicate::LLVMIntUGT,
            sum,
            lim,
            c("o").as_ptr(),
        );
        let br = LLVMBuildCondBr(b, cmp, over, done);
        // Almost never taken.
        let w = |x: u64| LLVMValueAsMetadata(LLVMConstInt(i32t, x, 0));
        let mut md = [
            LLVMMDStringInContext2(ctx, c("branch_weights").as_ptr(), 14),
            w(1),
            w(1 << 20),
        ];
        let node = LLVMMDNodeInContext2(ctx, md.as_mut_ptr(), 3);
        let kind = LLVMGetMDKindIDInContext(ctx, c("prof").as_ptr(), 4);
        LLVMSetMetadata(br, kind, LLVMMetadataAsValue(ctx, node));
        LLVMPositionBuilderAtEnd(b, over);
        let mut args = [LLVMGetParam(count_fn, 2)];
        LLVMBuildCall2(b, hit_ty, hit, args.as_mut_ptr(), 1, c("").as_ptr());
        LLVMBuildBr(b, done);
        LLVMPositionBuilderAtEnd(b, done);
        LLVMBuildRetVoid(b);
    }

    let mut strings = Strings {
        module: m,
        ctx,
        cache: Default::default(),
    };
    let mut sites: Vec<LLVMValueRef> = Vec::new();
    // (function, insertion point, checks the limit) per counted block, in site order.
    let mut block_refs: Vec<(LLVMValueRef, LLVMValueRef, bool)> = Vec::new();
    let mut f = LLVMGetFirstFunction(m);
    while !f.is_null() {
        let next = LLVMGetNextFunction(f);
        let mut len = 0;
        let name_ptr = LLVMGetValueName2(f, &mut len);
        let name = String::from_utf8_lossy(std::slice::from_raw_parts(name_ptr as *const u8, len))
            .into_owned();
        if LLVMCountBasicBlocks(f) == 0 || name.starts_with("__bbv") || external_copy(ctx, f) {
            f = next;
            continue;
        }
        let fname = strings.get(&name);
        let check_at = check_points(f);
        let mut bb = LLVMGetFirstBasicBlock(f);
        let mut index = 0;
        while !bb.is_null() {
            let n = counted(bb);
            if let Some(at) = insertion_point(bb) {
                let (file, line) = location(bb);
                let file = strings.get(&file);
                let mut vals = [
                    fname,
                    file,
                    LLVMConstInt(i32t, u64::from(line), 0),
                    LLVMConstInt(i32t, n, 0),
                ];
                let init = LLVMConstNamedStruct(site_ty, vals.as_mut_ptr(), 4);
                sites.push(init);
                block_refs.push((f, at, checks && check_at[index]));
            }
            bb = LLVMGetNextBasicBlock(bb);
            index += 1;
        }
        f = next;
    }
    if !checks {
        // Tells the runtime that budgets would go unchecked (a weak definition: one per
        // program however many modules define it).
        let g = LLVMAddGlobal(m, i8t, c("__bbv_unchecked").as_ptr());
        LLVMSetInitializer(g, LLVMConstInt(i8t, 1, 0));
        LLVMSetLinkage(g, LLVMLinkage::LLVMWeakAnyLinkage);
        append_used(m, ctx, g);
    }
    if block_refs.is_empty() {
        LLVMDisposeBuilder(b);
        return;
    }
    // All sites of the module in one array, in block order.
    let sites_ty = LLVMArrayType(site_ty, sites.len() as u32);
    let sites_g = LLVMAddGlobal(m, sites_ty, c("__bbv_sites").as_ptr());
    LLVMSetInitializer(
        sites_g,
        LLVMConstArray(site_ty, sites.as_mut_ptr(), sites.len() as u32),
    );
    LLVMSetGlobalConstant(sites_g, 1);
    LLVMSetLinkage(sites_g, LLVMLinkage::LLVMPrivateLinkage);
    let counts_ty = LLVMArrayType(i64t, sites.len() as u32);
    let counts_g = if blocks_mode {
        let g = LLVMAddGlobal(m, counts_ty, c("__bbv_counts").as_ptr());
        LLVMSetInitializer(g, LLVMConstNull(counts_ty));
        LLVMSetLinkage(g, LLVMLinkage::LLVMPrivateLinkage);
        Some(g)
    } else {
        None
    };
    let zero = LLVMConstInt(i32t, 0, 0);
    let mut accs: std::collections::HashMap<LLVMValueRef, LLVMValueRef> = Default::default();
    for &(f, _, _) in &block_refs {
        accs.entry(f).or_insert_with(|| {
            let entry = LLVMGetEntryBasicBlock(f);
            LLVMPositionBuilderBefore(b, LLVMGetFirstInstruction(entry));
            let acc = LLVMBuildAlloca(b, i64t, c("bbv.acc").as_ptr());
            LLVMBuildStore(b, zero64, acc);
            acc
        });
    }
    for (i, &(f, at, check)) in block_refs.iter().enumerate() {
        let n = LLVMConstIntGetZExtValue(LLVMGetOperand(sites[i], 3));
        let acc = accs[&f];
        LLVMPositionBuilderBefore(b, at);
        let mut idx = [zero, LLVMConstInt(i32t, i as u64, 0)];
        let site = LLVMConstInBoundsGEP2(sites_ty, sites_g, idx.as_mut_ptr(), 2);
        if let Some(g) = counts_g {
            let p = LLVMConstInBoundsGEP2(counts_ty, g, idx.as_mut_ptr(), 2);
            let v = LLVMBuildLoad2(b, i64t, p, c("").as_ptr());
            let v = LLVMBuildAdd(b, v, LLVMConstInt(i64t, 1, 0), c("").as_ptr());
            LLVMBuildStore(b, v, p);
        }
        if check {
            let mut args = [acc, LLVMConstInt(i64t, n, 0), site];
            LLVMBuildCall2(b, count_ty, count_fn, args.as_mut_ptr(), 3, c("").as_ptr());
        } else {
            let v = LLVMBuildLoad2(b, i64t, acc, c("").as_ptr());
            let v = LLVMBuildAdd(b, v, LLVMConstInt(i64t, n, 0), c("").as_ptr());
            LLVMBuildStore(b, v, acc);
        }
    }
    // Flush before every call (a callee may never return), return and resume.
    for (&f, &acc) in &accs {
        let mut bb = LLVMGetFirstBasicBlock(f);
        while !bb.is_null() {
            let mut inst = LLVMGetFirstInstruction(bb);
            while !inst.is_null() {
                if needs_flush(inst) {
                    LLVMPositionBuilderBefore(b, inst);
                    let mut args = [acc];
                    LLVMBuildCall2(b, flush_ty, flush_fn, args.as_mut_ptr(), 1, c("").as_ptr());
                }
                inst = LLVMGetNextInstruction(inst);
            }
            bb = LLVMGetNextBasicBlock(bb);
        }
    }
    if let Some(counts) = counts_g {
        // struct { u64 *counts; site *sites; u64 n; } in section bbv_modules, which the runtime
        // walks from __start_bbv_modules to __stop_bbv_modules (in link order).
        let mut rf = [i64p, site_p, i64t];
        let rec_ty = LLVMStructTypeInContext(ctx, rf.as_mut_ptr(), 3, 0);
        let mut idx = [zero, zero];
        let mut vals = [
            LLVMConstInBoundsGEP2(counts_ty, counts, idx.as_mut_ptr(), 2),
            LLVMConstInBoundsGEP2(sites_ty, sites_g, idx.as_mut_ptr(), 2),
            LLVMConstInt(i64t, sites.len() as u64, 0),
        ];
        let rec = LLVMAddGlobal(m, rec_ty, c("__bbv_module").as_ptr());
        LLVMSetInitializer(rec, LLVMConstStructInContext(ctx, vals.as_mut_ptr(), 3, 0));
        LLVMSetSection(rec, c("bbv_modules").as_ptr());
        // Internal symbols in a named section survive only if marked used.
        LLVMSetLinkage(rec, LLVMLinkage::LLVMInternalLinkage);
        LLVMSetAlignment(rec, 8);
        append_used(m, ctx, rec);
    }
    LLVMDisposeBuilder(b);
}

/// Per block in layout order: whether it checks the limit (the entry block, and every target of
/// an edge that does not go forward in block order; every cycle contains such an edge).
unsafe fn check_points(f: LLVMValueRef) -> Vec<bool> {
    let mut blocks = Vec::new();
    let mut bb = LLVMGetFirstBasicBlock(f);
    while !bb.is_null() {
        blocks.push(bb);
        bb = LLVMGetNextBasicBlock(bb);
    }
    let index: std::collections::HashMap<LLVMBasicBlockRef, usize> =
        blocks.iter().enumerate().map(|(i, &b)| (b, i)).collect();
    let mut check = vec![false; blocks.len()];
    if let Some(c) = check.first_mut() {
        *c = true;
    }
    for (i, &bb) in blocks.iter().enumerate() {
        let term = LLVMGetBasicBlockTerminator(bb);
        if term.is_null() {
            continue;
        }
        for k in 0..LLVMGetNumSuccessors(term) {
            if let Some(&j) = index.get(&LLVMGetSuccessor(term, k)) {
                if j <= i {
                    check[j] = true;
                }
            }
        }
    }
    check
}

/// Whether the thread's counter must be current before `inst`: calls (except LLVM intrinsics
/// and our helpers), returns and resumes.
unsafe fn needs_flush(inst: LLVMValueRef) -> bool {
    match LLVMGetInstructionOpcode(inst) {
        LLVMOpcode::LLVMRet | LLVMOpcode::LLVMResume => true,
        LLVMOpcode::LLVMCall | LLVMOpcode::LLVMInvoke | LLVMOpcode::LLVMCallBr => {
            let callee = LLVMGetCalledValue(inst);
            if !callee.is_null() && !LLVMIsAInlineAsm(callee).is_null() {
                return false;
            }
            if callee.is_null() || LLVMIsAFunction(callee).is_null() {
                return true;
            }
            let mut len = 0;
            let name = LLVMGetValueName2(callee, &mut len);
            let name = if name.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(name as *const u8, len)
            };
            !(name.starts_with(b"llvm.") || name.starts_with(b"__bbv"))
        }
        _ => false,
    }
}

/// Adds `g` to `llvm.used`, rebuilding the array.
unsafe fn append_used(m: LLVMModuleRef, ctx: LLVMContextRef, g: LLVMValueRef) {
    let i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
    let name = c("llvm.used");
    let mut elems = Vec::new();
    let old = LLVMGetNamedGlobal(m, name.as_ptr());
    if !old.is_null() {
        let init = LLVMGetInitializer(old);
        if !init.is_null() {
            for i in 0..LLVMGetNumOperands(init) {
                elems.push(LLVMGetOperand(init, i as u32));
            }
        }
        LLVMDeleteGlobal(old);
    }
    elems.push(LLVMConstBitCast(g, i8p));
    let ty = LLVMArrayType(i8p, elems.len() as u32);
    let used = LLVMAddGlobal(m, ty, name.as_ptr());
    LLVMSetInitializer(
        used,
        LLVMConstArray(i8p, elems.as_mut_ptr(), elems.len() as u32),
    );
    LLVMSetLinkage(used, LLVMLinkage::LLVMAppendingLinkage);
    LLVMSetSection(used, c("llvm.metadata").as_ptr());
}
