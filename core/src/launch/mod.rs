//! Launch: learning from a launcher who this process is.
//!
//! A communicator created from a launcher's environment needs its rank, the
//! number of ranks and a bootstrap root, and every launcher (`streamcomm-run`,
//! torchrun, Slurm, Open MPI, PMI) spells them differently: [`detect_from_process_env`]
//! reads them all into one [`LaunchInfo`], which is what
//! [`Communicator::from_env`](crate::Communicator::from_env) joins, so that it
//! works the same under `streamcomm-run`, torchrun, Slurm, Open MPI and PMI
//! (MPICH, Intel MPI). Every error names the variable at fault.
//!
//! Launchers, in the order they are tried (the first whose rank or size
//! variable is set wins, e.g. torchrun inside a Slurm allocation is torchrun):
//!
//! | launcher | rank | size | local rank | local size |
//! |---|---|---|---|---|
//! | `streamcomm-run`, torchrun | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `LOCAL_WORLD_SIZE` |
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_NTASKS` (`SLURM_NPROCS`) | `SLURM_LOCALID` | `SLURM_NTASKS_PER_NODE`, else from `SLURM_TASKS_PER_NODE` + `SLURM_NODEID`, else `SLURM_NTASKS / SLURM_NNODES` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_LOCAL_SIZE` |
//! | PMI | `PMI_RANK` | `PMI_SIZE` | `MPI_LOCALRANKID` / `PMI_LOCAL_RANK` | `MPI_LOCALNRANKS` / `PMI_LOCAL_SIZE` |
//!
//! Where a launcher leaves out the local figures: for torchrun-style and Open
//! MPI variables a missing local size means "all ranks on this host" and a
//! missing local rank means `rank % local_size`; for PMI a missing local rank
//! is 0 and a missing local size is 1 (or the world size when only the local
//! rank is known). Empty variables count as unset.
//!
//! The bootstrap root ([`RootSpec`]): `STREAMCOMM_UNIQUE_ID` if set (what
//! `streamcomm-run` sets); otherwise `MASTER_ADDR` + `MASTER_PORT`, for every
//! launcher (set them yourself under Slurm and MPI), with the secret taken
//! from `STREAMCOMM_SECRET` (32 hex digits) if set. **Without
//! `STREAMCOMM_SECRET` the secret is derived from `MASTER_ADDR:MASTER_PORT`**,
//! so anyone who knows the address can join: it only keeps apart jobs that
//! happen to reuse a port, it is no protection against a hostile user on the
//! network. Set `STREAMCOMM_SECRET` (e.g. `openssl rand -hex 16`) for that.
//!
//! Starting ranks is the launcher's job, not the library's: the
//! `streamcomm-run` binary and its library (crate `streamcomm-run`: the local
//! launcher, its command line, multi-node jobs) are a crate of their own.

pub(crate) mod env;

pub use env::{LaunchInfo, RootSpec, detect_from_process_env, launched};
