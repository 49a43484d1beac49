//! The fuzz test's groups over what other tools hand bbv (fuzz_cli.rs has the mutator and the
//! rules every case must keep): a stand-in Accel-Sim printing a real run's output broken one
//! way, with the sample's `weights.csv`, list and summary broken (`bbv gpu simulate`); cubins
//! broken before the real nvdisasm reads them, and nvdisasm's listing broken (`bbv gpu cfg`);
//! and `checkpoints.json` broken (`bbv checkpoint --check`, QEMU 10).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{built_by, copy_dir};
use crate::fuzz_cli::{fuzz, gpu_dir, run_once, Target};

/// `path` made an executable shell script.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut p = std::fs::metadata(path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(path, p).unwrap();
}

/// gpu_dir's sample simulated once with the real Accel-Sim through a folder laid out as
/// scripts/accelsim's (`accelsim/`: its configuration copied, the simulator a script), whose
/// simulator then becomes a stand-in that prints what the real one printed
/// (`accelsim/accelsim.out`).
fn accelsim_dir(work: &Path) -> PathBuf {
    let dir = gpu_dir(work);
    let real = built_by("accelsim");
    let stand_in = dir.join("accelsim");
    for sub in ["bin", "lib", "configs"] {
        std::fs::create_dir_all(stand_in.join(sub)).unwrap();
    }
    copy_dir(
        &real.join("configs/SM6_TITANX"),
        &stand_in.join("configs/SM6_TITANX"),
    );
    let exe = stand_in.join("bin/accel-sim.out");
    let out = stand_in.join("accelsim.out");
    script(
        &exe,
        &format!(
            "LD_LIBRARY_PATH={lib} {sim} \"$@\" >{out}\ns=$?\ncat {out}\nexit $s",
            lib = real.join("lib").display(),
            sim = real.join("bin/accel-sim.out").display(),
            out = out.display()
        ),
    );
    let args = ["gpu", "simulate", "sample", "--accelsim", "accelsim"];
    let e = run_once(&args, &dir);
    assert_eq!(e.code, Some(0), "{}", e.stderr);
    script(&exe, "exec cat \"$(dirname \"$0\")/../accelsim.out\"");
    crate::readback::every_file_reads_back(&dir.join("sample"));
    dir
}

#[test]
fn broken_accelsim_outputs_and_samples_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = accelsim_dir(work.path());
    let targets = [Target::new(
        "gpu simulate",
        &dir,
        &[
            "accelsim/accelsim.out",
            "accelsim/configs/SM6_TITANX/gpgpusim.config",
            "sample/weights.csv",
            "sample/kernelslist.g",
            "sample/summary.json",
        ],
        &[
            "gpu",
            "simulate",
            "{D}/sample",
            "--accelsim",
            "{D}/accelsim",
            "--jobs",
            "1",
        ],
    )];
    fuzz("Accel-Sim hand-offs", &targets, 100, work.path());
}

/// A cubin of the CFG test's kernels (sm_80, NVIDIA's nvcc from scripts/gpu-tools), the
/// listing the real nvdisasm gives of it, and a stand-in nvdisasm printing that listing.
fn cubin_dir(work: &Path) -> PathBuf {
    let bin = built_by("gpu-tools");
    let dir = work.join("cubin");
    std::fs::create_dir(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guests/gpu/cfg_kernels.cu");
    let cubin = dir.join("k.cubin");
    let o = Command::new(bin.join("nvcc"))
        .args(["-cubin", "-arch", "sm_80", "-o"])
        .arg(&cubin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(bin.join("nvdisasm"))
        .arg("-c")
        .arg(&cubin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(dir.join("listing.sass"), &o.stdout).unwrap();
    script(
        &dir.join("nvdisasm"),
        "exec cat \"$(dirname \"$0\")/listing.sass\"",
    );
    std::fs::copy(bin.join("nvdisasm"), dir.join("real-nvdisasm")).unwrap();
    let args = [
        "gpu",
        "cfg",
        "--nvdisasm",
        "./nvdisasm",
        "-o",
        "cfg.json",
        "k.cubin",
    ];
    let e = run_once(&args, &dir);
    assert_eq!(e.code, Some(0), "{}", e.stderr);
    crate::readback::every_file_reads_back(&dir);
    dir
}

#[test]
fn broken_cubins_and_disassembly_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = cubin_dir(work.path());
    let targets = [
        Target::new(
            "gpu cfg",
            &dir,
            &["k.cubin"],
            &[
                "gpu",
                "cfg",
                "--nvdisasm",
                "{D}/real-nvdisasm",
                "-o",
                "{D}/cfg.json",
                "{D}/k.cubin",
            ],
        ),
        Target::new(
            "gpu cfg listing",
            &dir,
            &["listing.sass"],
            &[
                "gpu",
                "cfg",
                "--nvdisasm",
                "{D}/nvdisasm",
                "-o",
                "{D}/cfg.json",
                "{D}/k.cubin",
            ],
        ),
    ];
    fuzz("cubins and disassembly", &targets, 60, work.path());
}

/// A run of the checkpoint test's guest under QEMU 10 and its checkpoints (`run/checkpoints`),
/// in `work/ck`.
fn checkpoints_dir(work: &Path) -> PathBuf {
    let dir = work.join("ck");
    std::fs::create_dir(&dir).unwrap();
    crate::checkpoint_cli::guest(&dir);
    crate::checkpoint_cli::profile(&dir, "200");
    let q = crate::checkpoint_cli::q10();
    let o = crate::checkpoint_cli::bbv_in(&dir, &crate::checkpoint_cli::checkpointing(&q, "200"));
    crate::common::assert_status(&o, 0);
    let o = crate::checkpoint_cli::bbv_in(
        &dir,
        &["checkpoint", "--qemu", &q, "--check", "run/checkpoints"],
    );
    crate::common::assert_status(&o, 0);
    crate::readback::every_file_reads_back(&dir.join("run"));
    dir
}

#[test]
fn broken_checkpoint_indexes_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = checkpoints_dir(work.path());
    let q = crate::checkpoint_cli::q10();
    let q: &'static str = Box::leak(q.into_boxed_str());
    let targets = [Target {
        in_place: true,
        // A check that ran and found a checkpoint off its index's figures writes check.json
        // and exits 1: a result, not a refusal.
        one_is_not_failure: true,
        // QEMU reserves a large address space for its guest.
        limit_memory: false,
        ..Target::new(
            "checkpoint check",
            &dir,
            &["run/checkpoints/checkpoints.json"],
            &["checkpoint", "--qemu", q, "--check", "{D}/run/checkpoints"],
        )
    }];
    fuzz("checkpoint indexes", &targets, 60, work.path());
}
