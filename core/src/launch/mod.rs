//! Launch: starting ranks, and learning from a launcher who this process is.
//!
//! A communicator created from a launcher's environment needs its rank, the
//! number of ranks and a bootstrap root, and every launcher (torchrun, Slurm,
//! Open MPI, PMI) spells them differently: [`env`](mod@env) reads them all into one
//! [`LaunchInfo`](env::LaunchInfo). For jobs on one host, [`local`] is our own
//! launcher (what the `streamcomm-run` binary runs, with the command line of
//! [`cli`]): it hosts the bootstrap root itself and supervises the ranks as one
//! unit.

pub mod cli;
pub mod env;
pub mod local;
