//! Integration tests of the `bbv` binary.

mod collect_cli;
mod common;
mod golden;
mod gpu_cli;
mod simpoint_cli;
