//! bbv-guest: what the QEMU plugin knows of the guest process without QEMU's plugin API, as a
//! library of its own so that it is built and unit tested without QEMU.
//!
//! * [`maps`]: which mapped file (and offset) a host address belongs to. In user mode the
//!   guest's code lives in QEMU's own address space, so `/proc/self/maps` names it.
//! * [`state`]: for checkpoints, the guest's kernel-visible state (mappings, descriptors, signal
//!   dispositions and mask, program break) kept from its system calls.
//!
//! # Design constraints
//! * Linux only (`/proc/self/maps`, `/proc/self/mem`, `/proc/self/fd`); x86-64 system call
//!   numbers from [`bbv_plugin_contract::sysno`], the one table of them.
//! * Called from QEMU's callbacks (behind the plugin's panic guard): what cannot be kept is
//!   recorded as a problem for the checkpoint to report, not an error that stops the guest.

pub mod maps;
pub mod state;
