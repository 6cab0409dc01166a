//! Launch: starting ranks, and learning from a launcher who this process is.
//!
//! A communicator created from a launcher's environment needs its rank, the
//! number of ranks and a bootstrap root, and every launcher (torchrun, Slurm,
//! Open MPI, PMI) spells them differently: [`env`](mod@env) reads them all into one
//! [`LaunchInfo`](env::LaunchInfo). [`local`] is our own launcher (what the
//! `streamcomm-run` binary runs, with the command line of [`cli`]): it starts
//! and supervises one host's ranks as one unit, hosting the bootstrap root
//! itself. For jobs across hosts, one `streamcomm-run` runs per node, and
//! [`nodes`] works out each node's share: its ranks, the root (served by
//! node 0's launcher) and the secret.

pub mod cli;
pub mod env;
pub mod local;
pub mod nodes;
