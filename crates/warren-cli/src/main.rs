//! `warren`: parse arguments, call a library, print. Errors are one clear line per problem on
//! stderr and a non-zero exit code; no backtraces.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let _failpoints = warren_config::failpoint::init_from_env();
    let cli = cli::Cli::parse();
    init_logging(&cli);
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

fn init_logging(cli: &cli::Cli) {
    use tracing::level_filters::LevelFilter;
    let level = match (cli.verbose, matches!(cli.command, cli::Command::Daemon)) {
        (0, false) => LevelFilter::WARN,
        (0, true) => LevelFilter::INFO,
        (1, _) => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    // One-shot commands print bare lines; the daemon's log lines carry timestamps.
    if matches!(cli.command, cli::Command::Daemon) {
        builder.init();
    } else {
        builder.without_time().init();
    }
}
