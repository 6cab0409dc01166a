//! The command line of `streamcomm-run`, parsed by hand.
//!
//! The grammar is tiny (`-n N [--] PROGRAM ARGS...`) and must pass the
//! program's own arguments through untouched, including ones that look like
//! our options, so a hand-written parser is simpler than a dependency. It is
//! here rather than in the binary so that it is unit-tested and documented.

use std::ffi::OsString;

use crate::{Error, Result};

/// Most ranks `streamcomm-run` starts on one host.
pub const MAX_NPROC: usize = 4096;

/// The help text of `streamcomm-run`.
pub const USAGE: &str = "\
usage: streamcomm-run -n N [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this host, like torchrun --nproc-per-node=N.
Each rank gets STREAMCOMM_UNIQUE_ID, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the launcher hosts the
bootstrap root. Output lines are prefixed with [rank i]. When a rank fails,
the others are stopped (SIGTERM, then SIGKILL after 2 s) and the launcher
exits with the failed rank's status.

options:
  -n, --nproc N   number of ranks to start (1..=4096)
  -h, --help      print this help
  --              end of options (the next word is PROGRAM)";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Print [`USAGE`] and exit successfully.
    Help,
    /// Run a job.
    Run(RunArgs),
}

/// A job to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunArgs {
    /// Number of ranks.
    pub nproc: usize,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments, passed through untouched.
    pub args: Vec<OsString>,
}

/// Parses `streamcomm-run`'s arguments (without the program name).
///
/// Options come first; the first word that is not an option (or the word
/// after `--`) is the program, and everything after it belongs to the program.
///
/// # Examples
///
/// ```
/// use streamcomm::launch::cli::{parse_args, Parsed};
///
/// let Parsed::Run(run) = parse_args(["-n", "2", "echo", "-n", "hi"].map(Into::into))? else {
///     unreachable!()
/// };
/// assert_eq!((run.nproc, run.program.to_str(), run.args.len()), (2, Some("echo"), 2));
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidArgument`] describing the problem: an unknown option, a
/// missing or invalid `-n`, or no program.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Parsed> {
    let mut args = args.into_iter();
    let mut nproc = None;
    let program = loop {
        let Some(word) = args.next() else {
            break None;
        };
        let Some(text) = word.to_str() else {
            // Not UTF-8, so not one of our options: the program.
            break Some(word);
        };
        match text {
            "--" => break args.next(),
            "-h" | "--help" => return Ok(Parsed::Help),
            "-n" | "--nproc" => {
                let value = args
                    .next()
                    .ok_or_else(|| Error::invalid(format!("{text} needs a value")))?;
                nproc = Some(parse_nproc(text, &value.to_string_lossy())?);
            }
            _ if text.starts_with("--nproc=") => {
                nproc = Some(parse_nproc("--nproc", &text["--nproc=".len()..])?);
            }
            _ if text.starts_with("-n") && text.len() > 2 => {
                nproc = Some(parse_nproc("-n", &text[2..])?);
            }
            _ if text.starts_with('-') && text.len() > 1 => {
                return Err(Error::invalid(format!("unknown option {text:?}")));
            }
            _ => break Some(word),
        }
    };
    let program = program.ok_or_else(|| Error::invalid("no program to run"))?;
    let nproc = nproc.ok_or_else(|| Error::invalid("missing -n N (the number of ranks)"))?;
    Ok(Parsed::Run(RunArgs {
        nproc,
        program,
        args: args.collect(),
    }))
}

fn parse_nproc(option: &str, value: &str) -> Result<usize> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_NPROC).contains(&n) => Ok(n),
        _ => Err(Error::invalid(format!(
            "{option} needs a number of ranks between 1 and {MAX_NPROC}, got {value:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Parsed> {
        parse_args(words.iter().map(OsString::from))
    }

    fn run(words: &[&str]) -> RunArgs {
        match parse(words) {
            Ok(Parsed::Run(r)) => r,
            other => panic!("{words:?}: {other:?}"),
        }
    }

    fn message(words: &[&str]) -> String {
        match parse(words) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{words:?}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn accepted_forms() {
        for words in [
            &["-n", "3", "prog", "a"][..],
            &["--nproc", "3", "prog", "a"],
            &["--nproc=3", "prog", "a"],
            &["-n3", "prog", "a"],
            &["-n", "3", "--", "prog", "a"],
            &["-n", "1", "-n", "3", "prog", "a"],
        ] {
            let r = run(words);
            assert_eq!(
                (r.nproc, r.program.to_str()),
                (3, Some("prog")),
                "{words:?}"
            );
            assert_eq!(r.args, vec![OsString::from("a")], "{words:?}");
        }
        // The program's own options are passed through, even ours.
        let r = run(&["-n", "2", "--", "-weird", "-n", "5", "--help"]);
        assert_eq!(r.program, "-weird");
        assert_eq!(r.args, ["-n", "5", "--help"].map(OsString::from).to_vec());
        assert_eq!(parse(&["-h"]).ok(), Some(Parsed::Help));
        assert_eq!(
            parse(&["-n", "2", "--help", "prog"]).ok(),
            Some(Parsed::Help)
        );
    }

    #[test]
    fn errors() {
        assert_eq!(message(&[]), "no program to run");
        assert_eq!(message(&["-n", "2"]), "no program to run");
        assert_eq!(message(&["-n", "2", "--"]), "no program to run");
        assert_eq!(message(&["prog"]), "missing -n N (the number of ranks)");
        assert_eq!(message(&["-n"]), "-n needs a value");
        assert!(message(&["-n", "x", "prog"]).contains("got \"x\""));
        assert!(message(&["-n", "0", "prog"]).contains("between 1 and"));
        assert!(message(&["--nproc=99999", "prog"]).contains("between 1 and"));
        assert_eq!(message(&["-x", "prog"]), "unknown option \"-x\"");
    }
}
