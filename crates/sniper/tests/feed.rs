//! bbv-sift's feed driven as QEMU's plugin drives it, into the real Sniper: a window opened at
//! one marker event (the warmup, simulated in detail), a region marker at a second, its end at
//! a third; thread 1 creates thread 2 at a `clone`'s return, both run, thread 2's exit wakes
//! thread 1's join. Sniper retires each thread's region instructions on its own core, and
//! keeps thread 1 idle while it waits for thread 2.

use bbv_sift::feed::{Code, Feed, Sync, WindowSpec};
use bbv_sift::Instruction;

mod common;
use common::{iteration, sniper};

const TID_WORD: u64 = 0x7fff_0000;
/// The window's events: its warmup's start, its end, its region's start.
const WARMUP: u32 = 10;
const END: u32 = 11;
const REGION: u32 = 12;

/// The loop's four instructions at `base` as the plugin's translation describes them.
fn codes(base: u64) -> [&'static Code; 4] {
    iteration(base, 0, false).map(|i: Instruction| {
        let mut bytes = [0u8; bbv_sift::MAX_SIZE];
        bytes[..i.bytes.len()].copy_from_slice(&i.bytes);
        &*Box::leak(Box::new(Code {
            ip: i.address,
            bytes,
            len: i.bytes.len() as u8,
            fallthrough: i.address + i.bytes.len() as u64,
            branch: i.branch,
            always_taken: false,
            loads: i.memory.len() as u8,
            stores: 0,
            rep: false,
        }))
    })
}

/// Thread `thread` runs `n` iterations of the loop at `base`.
fn run(feed: &mut Feed, thread: u32, base: u64, n: u64) {
    let code = codes(base);
    for k in 0..n {
        for (c, i) in code.iter().zip(iteration(base, k, k + 1 == n)) {
            feed.exec(thread, c);
            for &a in &i.memory {
                feed.access(thread, a, false);
            }
        }
    }
}

#[test]
fn a_region_of_two_threads_is_fed_as_the_plugin_feeds_it() {
    let s = sniper();
    let work = tempfile::tempdir().unwrap();
    let live = s.start_from_marker(work.path(), 2, None).unwrap();
    let spec = WindowSpec {
        start: WARMUP,
        alt: u32::MAX,
        end: END,
        roi: REGION,
        limit: u64::MAX,
        pid: Some(live.pid()),
        prefix: live.prefix().to_path_buf(),
        threads: true,
    };
    let mut feed = Feed::new(vec![spec], None, true);
    assert!(feed.arm(WARMUP));
    assert!(feed.busy());
    // The warmup marker's instruction is pending when its event fires.
    let first = codes(0);
    feed.exec(1, first[0]);
    feed.event(1, WARMUP);
    run(&mut feed, 1, 0, 2_000);
    feed.exec(1, first[0]);
    feed.event(1, REGION);
    // The region: thread 1 creates thread 2, works 5,000 iterations and joins it; thread 2
    // works 20,000 and exits (before the join returns in the guest).
    feed.sync(1, Sync::Created(2));
    run(&mut feed, 2, 0x10_0000, 20_000);
    let exit = Sync::Exited {
        joiners: vec![(TID_WORD, 1)],
        id: 1,
    };
    feed.sync(2, exit);
    run(&mut feed, 1, 0, 5_000);
    let join = Sync::Waited {
        addr: TID_WORD,
        val: 2,
        woken_by: Some(1),
    };
    feed.sync(1, join);
    run(&mut feed, 1, 0x20_0000, 5_000);
    feed.exec(1, first[0]);
    feed.event(1, END);
    assert!(!feed.busy());
    assert!(feed.take_errors().is_empty());
    feed.finish();
    let out = live.finish().unwrap();
    assert_eq!(out.instructions.len(), 2, "{out:?}");
    // The region's own instructions on each core (less what the reorder buffer held).
    assert!(out.instructions[0].abs_diff(4 * 10_000) < 300, "{out:?}");
    assert!(out.instructions[1].abs_diff(4 * 20_000) < 300, "{out:?}");
    // Thread 1 waited for thread 2's 20,000 iterations after its own 5,000.
    let idle = out.idle[0].0 / out.idle[0].1;
    assert!(idle > 0.1, "{out:?}");
}
