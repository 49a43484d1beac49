//! What the tests with the real Sniper share: the build, and a loop of real x86-64
//! instructions to stream.

use std::path::{Path, PathBuf};
use std::process::Command;

use bbv_sift::Instruction;
use bbv_sniper::Sniper;

/// scripts/sniper's build (built first if it is not there).
pub fn sniper() -> Sniper {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/sniper");
    let out = Command::new(&script).output().expect("scripts/sniper");
    assert!(
        out.status.success(),
        "scripts/sniper: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    Sniper::find(Some(&root)).unwrap()
}

/// The `k`th iteration of a loop (an add, a load walking 512 KiB a cache line at a time, a
/// decrement, a branch back) whose code and data lie `base` bytes further on; `last` ends it
/// (its branch not taken).
pub fn iteration(base: u64, k: u64, last: bool) -> [Instruction; 4] {
    let i = |address: u64, bytes: &[u8], memory: Vec<u64>, branch: bool, taken: bool| Instruction {
        address: base + address,
        bytes: bytes.to_vec(),
        memory,
        branch,
        taken,
    };
    [
        i(0x401000, &[0x48, 0x83, 0xc0, 0x01], vec![], false, false),
        i(
            0x401004,
            &[0x48, 0x8b, 0x1e],
            vec![base + 0x7000_0000 + (k % 8192) * 64],
            false,
            false,
        ),
        i(0x401007, &[0x48, 0xff, 0xc9], vec![], false, false),
        i(0x40100a, &[0x75, 0xf4], vec![], true, !last),
    ]
}
