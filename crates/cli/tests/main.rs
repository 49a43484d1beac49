//! Integration tests of the `bbv` binary.

mod band_cli;
mod cc_cli;
mod champsim_cli;
mod checkpoint_cli;
mod collect_cli;
mod common;
mod crash_cli;
mod fuzz_cli;
mod golden;
mod gpu_cfg_cli;
mod gpu_cli;
mod gpu_live_cli;
mod gpu_simulate_cli;
mod hostile_cli;
mod looppoint_cli;
mod progress_cli;
mod qemu10_cli;
mod regions_cli;
mod report_cli;
mod schedule_cli;
mod signals_cli;
mod simpoint_cli;
mod suite_cli;
mod trace_cli;
mod trace_isa_cli;
mod validate_cli;
