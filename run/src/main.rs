//! `streamcomm-run [NODE OPTIONS] -n N [--keep-going] [--cuda-stand-in] [--]
//! PROGRAM [ARGS...]`: runs N local ranks of PROGRAM, alone or as one node
//! of a multi-node job, on the GPUs or (`--cuda-stand-in`) on the CPU
//! stand-in for the CUDA driver.
//!
//! A thin `main` over the `streamcomm_run` library: parse the command line, for a
//! multi-node job resolve this node's part (and on node 0 start the
//! bootstrap root), pass termination signals on to the ranks, run the job,
//! and turn its outcome into an exit status (2 for a usage error, the failed
//! rank's status when a rank fails, after the others have been stopped or,
//! with `--keep-going`, have run to their end). It never panics: output
//! errors are ignored.

use std::io::Write;

use streamcomm::Error;
use streamcomm_run::cli::{Parsed, RunArgs, USAGE, parse_args};
use streamcomm_run::local::{LocalLauncher, Outcome, install_termination_handler};
use streamcomm_run::nodes::NodeJob;
use streamcomm_run::substitute::{CUDA_STAND_IN, Library, NCCL, Substitute};

fn main() {
    std::process::exit(run());
}

fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "streamcomm-run: {line}");
}

fn run() -> i32 {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return 0;
        }
        Err(e) => {
            say(format_args!("{e}\nrun 'streamcomm-run --help' for usage"));
            return 2;
        }
    };
    let keep_going = args.keep_going;
    // Kept until the ranks have ended: dropping them removes the
    // directories of links the ranks load the libraries from.
    let wanted: Vec<Library> = [(args.cuda_stand_in, CUDA_STAND_IN), (args.nccl, NCCL)]
        .into_iter()
        .filter_map(|(on, kind)| on.then_some(kind))
        .collect();
    let exe = std::env::current_exe().ok();
    let mut substitutes = Vec::new();
    for kind in wanted {
        match Substitute::prepare(kind, &|name| std::env::var_os(name), exe.as_deref()) {
            Ok(s) => {
                say(format_args!("{}", s.notice()));
                substitutes.push(s);
            }
            Err(e) => {
                say(format_args!("{e}"));
                return 1;
            }
        }
    }
    let launcher = match launcher(args) {
        Ok(launcher) => launcher,
        Err(e @ Error::InvalidArgument(_)) => {
            say(format_args!("{e}"));
            return 2;
        }
        Err(e) => {
            say(format_args!("{e}"));
            return 1;
        }
    };
    let mut path = std::env::var_os("LD_LIBRARY_PATH");
    for s in &substitutes {
        path = Some(s.ld_library_path(path.as_deref()));
    }
    let launcher = match path {
        Some(path) if !substitutes.is_empty() => launcher.env("LD_LIBRARY_PATH", path),
        _ => launcher,
    };
    if let Err(e) = install_termination_handler() {
        say(format_args!("warning: {e}"));
    }
    match launcher.run() {
        Ok(Outcome::Success) => 0,
        Ok(outcome @ Outcome::RankFailed { .. }) if keep_going => {
            say(format_args!(
                "{outcome}; the other ranks ran to their end (--keep-going)"
            ));
            outcome.exit_code()
        }
        Ok(outcome @ Outcome::RankFailed { .. }) => {
            say(format_args!("{outcome}; stopped the other ranks"));
            outcome.exit_code()
        }
        Ok(outcome) => {
            say(format_args!("{outcome}; stopped the ranks"));
            outcome.exit_code()
        }
        Err(e) => {
            say(format_args!("{e}"));
            1
        }
    }
}

/// The launcher for this host's ranks; for a node of a multi-node job,
/// resolves its part first (and on node 0 starts the bootstrap root).
/// Options that apply to any job (`--keep-going`) are set here, for both.
fn launcher(args: RunArgs) -> streamcomm::Result<LocalLauncher> {
    let launcher = match &args.nodes {
        None => LocalLauncher::new(args.nproc, args.program).args(args.args),
        Some(nodes) => {
            let job = NodeJob::resolve(nodes, args.nproc, &|name| std::env::var(name).ok())?;
            for warning in job.warnings() {
                say(format_args!("warning: {warning}"));
            }
            job.launcher(args.program, args.args)?
        }
    };
    Ok(launcher.keep_going(args.keep_going))
}
