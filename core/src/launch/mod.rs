//! Launch: learning from a launcher who this process is.
//!
//! A communicator created from a launcher's environment needs its rank, the
//! number of ranks and a bootstrap root, and every launcher (`streamcomm-run`,
//! torchrun, Slurm, Open MPI, PMI) spells them differently: [`env`](mod@env)
//! reads them all into one [`LaunchInfo`](env::LaunchInfo), which is what
//! [`Communicator::from_env`](crate::Communicator::from_env) joins.
//!
//! Starting ranks is the launcher's job, not the library's: the
//! `streamcomm-run` binary and its library (crate `streamcomm-run`: the local
//! launcher, its command line, multi-node jobs) are a crate of their own.

pub mod env;
