//! Integration tests of the `bbv` binary.

mod common;
mod golden;
mod gpu_cli;
mod simpoint_cli;
