//! `streamcomm-run -n N [--] PROGRAM [ARGS...]`: runs N local ranks of PROGRAM.
//!
//! A thin `main` over [`streamcomm::launch::local`]: parse the command line,
//! pass termination signals on to the ranks, run the job, and turn its
//! outcome into an exit status (2 for a usage error, the failed rank's status
//! when a rank fails). It never panics: output errors are ignored.

use std::io::Write;

use streamcomm::launch::cli::{parse_args, Parsed, USAGE};
use streamcomm::launch::local::{install_termination_handler, LocalLauncher, Outcome};

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return 0;
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "streamcomm-run: {e}\nrun 'streamcomm-run --help' for usage"
            );
            return 2;
        }
    };
    if let Err(e) = install_termination_handler() {
        let _ = writeln!(std::io::stderr(), "streamcomm-run: warning: {e}");
    }
    let launcher = LocalLauncher::new(args.nproc, args.program).args(args.args);
    match launcher.run() {
        Ok(Outcome::Success) => 0,
        Ok(outcome @ Outcome::RankFailed { .. }) => {
            let _ = writeln!(
                std::io::stderr(),
                "streamcomm-run: {outcome}; stopped the other ranks"
            );
            outcome.exit_code()
        }
        Ok(outcome) => {
            let _ = writeln!(
                std::io::stderr(),
                "streamcomm-run: {outcome}; stopped the ranks"
            );
            outcome.exit_code()
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "streamcomm-run: {e}");
            1
        }
    }
}
