//! `bbv cc` / `bbv c++`: the options; the build itself is `bbv_cc::build`.

use std::ffi::OsString;

use anyhow::Result;
use bbv_cc::{Mode, Request};

/// `bbv cc` / `bbv c++` options.
#[derive(clap::Args, Debug)]
pub struct CcArgs {
    /// total: per-thread totals and budgets; blocks: also per-block counts and BBV intervals;
    /// count: per-thread totals only, without budget checks (the cheapest).
    #[arg(long, value_name = "total|blocks|count", default_value = "total", value_parser = ["total", "blocks", "count"])]
    pub mode: String,
    /// Print the commands run.
    #[arg(short, long)]
    pub verbose: bool,
    /// The compiler (clang-14/15/16 or clang++-14/15/16) and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMPILER ARGS"
    )]
    pub command: Vec<OsString>,
}

/// Runs the wrapper.
pub fn run_cc(a: CcArgs) -> Result<()> {
    let mode = match a.mode.as_str() {
        "blocks" => Mode::Blocks,
        "count" => Mode::Count,
        _ => Mode::Total,
    };
    bbv_cc::build(&Request {
        mode,
        verbose: a.verbose,
        command: a.command,
    })?;
    Ok(())
}
