//! `warren`: parse arguments, call a library, print. Errors are one clear line per problem on
//! stderr and a non-zero exit code; no backtraces.

mod cli;
mod commands;
mod logging;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let _failpoints = warren_config::failpoint::init_from_env();
    let cli = cli::Cli::parse();
    logging::init(&cli);
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            for line in format!("{err:#}").lines() {
                eprintln!("error: {line}");
            }
            ExitCode::FAILURE
        }
    }
}
