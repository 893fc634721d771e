//! `warren`: parse arguments, call a library, print. Errors are one clear line per problem on
//! stderr and a non-zero exit code; no backtraces.

/// `println!` for every module below: a closed pipe ends the process quietly (see [`output`]).
macro_rules! println {
    () => {
        $crate::output::write_out(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*), true)
    };
}

/// `print!` for every module below: a closed pipe ends the process quietly (see [`output`]).
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*), false)
    };
}

mod cli;
mod commands;
mod completion;
mod logging;
mod output;
mod resident;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // `warren --version` (or `-V`) alone answers before clap builds the command tree, which
    // costs a third of a MB of heap and most of the run (issue 26); the text is clap's.
    let mut args = std::env::args_os().skip(1);
    if let (Some(flag), None) = (args.next(), args.next())
        && (flag == "--version" || flag == "-V")
    {
        // One constant written whole: no formatting machinery paged in (issue 26).
        const LINE: &str = concat!("warren ", env!("CARGO_PKG_VERSION"), "\n");
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), LINE.as_bytes());
        return ExitCode::SUCCESS;
    }
    // A Tab in a shell that sourced `warren completions SHELL` (answers and exits).
    completion::complete_if_asked();
    let _failpoints = warren_config::failpoint::init_from_env();
    let cli = cli::Cli::parse();
    if let cli::Command::Completions { shell } = cli.command {
        return match completion::registration(shell) {
            Ok(script) => {
                output::write_bytes(&script);
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: writing the completion script: {err}");
                ExitCode::FAILURE
            }
        };
    }
    logging::init(&cli);
    match commands::run(cli) {
        Ok(code) => code,
        // A reader that went away (`warren sessions list --json | head -1`) is not an error.
        Err(err) if output::is_closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            for line in chain_text(&err).lines() {
                eprintln!("error: {line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes as one text, each cause once: a wrapper whose message already
/// shows its cause (`memory file X: No space left on device (os error 28)`) is not followed by
/// that text again, as `{:#}` would (issue 15 §8).
fn chain_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::chain_text;

    /// A wrapper that shows its source in its own message, as several store errors do.
    #[derive(Debug)]
    struct Wrapped {
        source: std::io::Error,
    }

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "memory file /x/notes.md: {}", self.source)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_its_wrapper_is_printed_once() {
        let full = || std::io::Error::from_raw_os_error(28);
        let err = anyhow::Error::new(Wrapped { source: full() }).context("storing a memory");
        let text = chain_text(&err);
        assert_eq!(
            text,
            "storing a memory: memory file /x/notes.md: No space left on device (os error 28)"
        );
        assert_eq!(format!("{err:#}").matches("os error 28").count(), 2);

        let plain = anyhow::Error::new(full()).context("reading config.toml");
        assert_eq!(
            chain_text(&plain),
            "reading config.toml: No space left on device (os error 28)"
        );
    }
}
