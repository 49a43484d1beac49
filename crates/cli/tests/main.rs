//! Integration tests of the `bbv` binary.

mod common;
mod golden;
mod simpoint_cli;
