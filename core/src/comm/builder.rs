//! [`CommunicatorBuilder`]: the one way to create a communicator with
//! settings other than the environment's.

use std::time::Duration;

use super::{Communicator, create};
use crate::barrier::BarrierAlgo;
use crate::bootstrap::UniqueId;
use crate::config::{Config, TransportChoice};
use crate::{Error, Result};

/// Creates a [`Communicator`]: who the ranks are and where they meet, and
/// the settings that differ from the environment's.
///
/// Made by [`Communicator::builder`]. Two ways to say who the ranks are:
/// - [`unique_id`](Self::unique_id), [`rank`](Self::rank) and
///   [`size`](Self::size), all three, as `ncclCommInitRank` takes them;
/// - none of the three: the launcher's environment says (`streamcomm-run`,
///   torchrun, Slurm, Open MPI or PMI; see [`launch`](crate::launch)).
///
/// Settings start from [`Config::from_env`] (the defaults with the
/// `STREAMCOMM_*` variables applied), or from [`config`](Self::config);
/// the other setters then override single fields.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use streamcomm::{bootstrap::UniqueId, Communicator};
///
/// let comm = Communicator::builder()
///     .unique_id(&UniqueId::new()?)
///     .rank(0)
///     .size(1)
///     .timeout(Duration::from_secs(30))
///     .build()?;
/// assert_eq!(comm.config().timeout, Duration::from_secs(30));
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct CommunicatorBuilder {
    id: Option<UniqueId>,
    rank: Option<usize>,
    size: Option<usize>,
    config: Option<Config>,
    timeout: Option<Duration>,
    transport: Option<TransportChoice>,
    barrier_algo: Option<BarrierAlgo>,
}

impl CommunicatorBuilder {
    /// The communicator to join: the [`UniqueId`] one rank created and
    /// handed to the others.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator};
    /// let id = UniqueId::new()?; // on one rank; `id.to_string()` travels to the others
    /// let comm = Communicator::builder().unique_id(&id).rank(0).size(1).build()?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn unique_id(mut self, id: &UniqueId) -> Self {
        self.id = Some(*id);
        self
    }

    /// This process's rank, `0..size`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator};
    /// let comm = Communicator::builder().unique_id(&UniqueId::new()?).rank(0).size(1).build()?;
    /// assert_eq!(comm.rank(), 0);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn rank(mut self, rank: usize) -> Self {
        self.rank = Some(rank);
        self
    }

    /// The number of ranks.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator};
    /// let comm = Communicator::builder().unique_id(&UniqueId::new()?).rank(0).size(1).build()?;
    /// assert_eq!(comm.size(), 1);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn size(mut self, size: usize) -> Self {
        self.size = Some(size);
        self
    }

    /// Settings to start from instead of [`Config::from_env`] (the
    /// environment's `STREAMCOMM_*` variables are then not read for them).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, Config};
    /// let mut config = Config::default();
    /// config.nsteps = 4;
    /// let comm = Communicator::builder()
    ///     .unique_id(&UniqueId::new()?)
    ///     .rank(0)
    ///     .size(1)
    ///     .config(config)
    ///     .build()?;
    /// assert_eq!(comm.config().nsteps, 4);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// How long any single wait may take before the communicator fails with
    /// [`Error::Timeout`] (overrides `STREAMCOMM_TIMEOUT`).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use streamcomm::{bootstrap::UniqueId, Communicator};
    /// let comm = Communicator::builder()
    ///     .unique_id(&UniqueId::new()?)
    ///     .rank(0)
    ///     .size(1)
    ///     .timeout(Duration::from_millis(2500))
    ///     .build()?;
    /// assert_eq!(comm.config().timeout.as_millis(), 2500);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Which transports connect the ranks (overrides
    /// `STREAMCOMM_TRANSPORT`; every rank must choose the same): a
    /// [`Transport`](crate::Transport) for that one only, or [`TransportChoice::Auto`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, Transport};
    /// let comm = Communicator::builder()
    ///     .unique_id(&UniqueId::new()?)
    ///     .rank(0)
    ///     .size(1)
    ///     .transport(Transport::Tcp)
    ///     .build()?;
    /// assert_eq!(comm.config().transport, Transport::Tcp.into());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn transport(mut self, transport: impl Into<TransportChoice>) -> Self {
        self.transport = Some(transport.into());
        self
    }

    /// The barrier algorithm (overrides `STREAMCOMM_BARRIER_ALGO`; every
    /// rank must choose the same).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, barrier::BarrierAlgo, Communicator};
    /// let comm = Communicator::builder()
    ///     .unique_id(&UniqueId::new()?)
    ///     .rank(0)
    ///     .size(1)
    ///     .barrier_algo(BarrierAlgo::Dissemination)
    ///     .build()?;
    /// assert_eq!(comm.config().barrier_algo, Some(BarrierAlgo::Dissemination));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn barrier_algo(mut self, algo: BarrierAlgo) -> Self {
        self.barrier_algo = Some(algo);
        self
    }

    /// Joins the communicator. Collective: every rank calls it, and it
    /// returns when all have joined.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{bootstrap::UniqueId, Communicator};
    ///
    /// // Two ranks as threads; processes pass the id's text form instead.
    /// let id = UniqueId::new()?;
    /// let threads: Vec<_> = (0..2)
    ///     .map(|rank| {
    ///         std::thread::spawn(move || Communicator::builder().unique_id(&id).rank(rank).size(2).build())
    ///     })
    ///     .collect();
    /// for t in threads {
    ///     assert_eq!(t.join().unwrap()?.size(), 2);
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when only some of unique id, rank and size
    /// are given, for `size == 0` or `rank >= size`, or naming a
    /// `STREAMCOMM_*` or launcher variable that does not parse;
    /// [`Error::Bootstrap`] / [`Error::Timeout`] when the ranks cannot meet;
    /// [`Error::Unavailable`] when a peer cannot be reached with the
    /// transports this build and `STREAMCOMM_TRANSPORT` allow (e.g. a peer on
    /// another host with `STREAMCOMM_TRANSPORT=shm`, or verbs forced without
    /// an RDMA device); [`Error::Os`] when shared memory fails.
    pub fn build(self) -> Result<Communicator> {
        let mut config = match self.config {
            Some(c) => c,
            None => Config::from_env()?,
        };
        if let Some(t) = self.timeout {
            config.timeout = t;
        }
        if let Some(t) = self.transport {
            config.transport = t;
        }
        if let Some(a) = self.barrier_algo {
            config.barrier_algo = Some(a);
        }
        let (id, rank, size) = match (self.id, self.rank, self.size) {
            (Some(id), Some(rank), Some(size)) => (id, rank, size),
            (None, None, None) => from_launcher()?,
            (id, rank, size) => {
                let missing: Vec<&str> = [
                    (id.is_none(), "unique_id"),
                    (rank.is_none(), "rank"),
                    (size.is_none(), "size"),
                ]
                .into_iter()
                .filter_map(|(m, name)| m.then_some(name))
                .collect();
                return Err(Error::invalid(format!(
                    "Communicator::builder(): {} not given; give unique_id, rank and size \
                     together, or none of them to read the launcher's environment",
                    missing.join(" and ")
                )));
            }
        };
        create::create(&id, rank, size, config).map(Communicator::from_inner)
    }
}

/// Who the ranks are and where they meet, from the launcher's variables.
/// Under torchrun-style variables (an address without a unique id), rank 0
/// hosts the bootstrap root there.
fn from_launcher() -> Result<(UniqueId, usize, usize)> {
    use crate::launch::env::{RootSpec, detect_from_process_env};
    let info = detect_from_process_env()?;
    let id = match info.root {
        RootSpec::UniqueId(id) => id,
        RootSpec::Address { addr, secret } if info.rank == 0 => UniqueId::serve_at(addr, secret)?,
        RootSpec::Address { addr, secret } => UniqueId::from_parts(addr, secret),
    };
    Ok((id, info.rank, info.size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Transport;

    #[test]
    fn a_partial_identity_is_refused_naming_what_is_missing() {
        let e = Communicator::builder()
            .rank(0)
            .config(Config::default())
            .build()
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("unique_id and size not given"),
            "unexpected message: {m}"
        );
    }

    #[test]
    fn setters_override_the_starting_config() {
        let base = Config {
            nsteps: 4,
            ..Config::default()
        };
        let comm = Communicator::builder()
            .unique_id(&UniqueId::new().unwrap())
            .rank(0)
            .size(1)
            .config(base)
            .timeout(Duration::from_secs(7))
            .transport(Transport::Shm)
            .barrier_algo(BarrierAlgo::Chain)
            .build()
            .unwrap();
        let c = comm.config();
        assert_eq!(
            (c.nsteps, c.timeout, c.barrier_algo),
            (4, Duration::from_secs(7), Some(BarrierAlgo::Chain))
        );
        assert_eq!(c.transport, TransportChoice::Only(Transport::Shm));
    }
}
