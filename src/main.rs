//! The `softroce` command-line tool.

mod cli;

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::parse();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "softroce: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
