//! Internals that the workspace's benchmark (`streamcomm-bench`) and
//! integration tests (`core/tests/`) reach, and nothing else: hidden from
//! the documentation, not part of the public API, no semver promise. Each
//! item is here because one of those needs it; remove it when the need goes.
//! (Plans, barrier plans and their simulators are the internal crate
//! `streamcomm-algo`'s: those reach it directly, not through here.)

/// The barrier's runtime.
pub mod barrier {
    /// The multicast barrier's counters on this rank, where its group was
    /// joined: `[barriers, questions asked, arrivals re-sent]` (the
    /// benchmark reports retransmits per barrier from them).
    pub fn multicast_stats(comm: &crate::Communicator) -> Option<[u64; 3]> {
        comm.inner.barrier.multicast_stats()
    }
}

/// The bootstrap network below `UniqueId`.
pub mod bootstrap {
    pub use crate::bootstrap::client::Bootstrap;
    pub use crate::bootstrap::root::{RootOptions, RootServer};
    pub use crate::bootstrap::wire::MAX_BLOB;
}

/// Launchers' variables below `launch::detect_from_process_env`: the job
/// secret and address resolution `streamcomm-run` shares with the library,
/// and detection over any variable source (for the decoders' fuzzing).
pub mod launch {
    pub use crate::launch::env::{JobSecret, detect, job_secret, resolve};
}

/// What ranks exchange at creation.
pub mod comm {
    pub use crate::comm::Endpoint;
}

/// Shared-memory segments and the tcp wire format.
pub mod transport {
    pub use crate::transport::Segment;
    pub use crate::transport::ring::RingShape;

    /// The peers this rank's links carry bytes to now, in rank order (a
    /// tcp peer counts once its sockets are made, a verbs peer once the
    /// pair's rings are registered, both on first use; a shared-memory
    /// peer from creation).
    pub fn connected_peers(comm: &crate::Communicator) -> Vec<usize> {
        peers_where(comm, crate::transport::Connection::connected)
    }

    /// The peers whose connection this rank has made, in rank order:
    /// [`connected_peers`], and a verbs peer once the pair's queue pairs
    /// are made (at its first use, by either side: a barrier's flag writes
    /// make them too, without a slot).
    pub fn made_peers(comm: &crate::Communicator) -> Vec<usize> {
        peers_where(comm, crate::transport::Connection::made)
    }

    fn peers_where(
        comm: &crate::Communicator,
        f: fn(&crate::transport::Connection) -> bool,
    ) -> Vec<usize> {
        let peers = comm.inner.core.peers();
        peers
            .iter()
            .flatten()
            .filter(|c| f(c))
            .map(|c| c.peer())
            .collect()
    }

    /// The tcp transport's frames.
    pub mod tcp_frame {
        pub use crate::transport::tcp::frame::{
            ABORT_LEN, CLOSE_LEN, FrameHeader, HEADER_BYTES, HELLO_BYTES, Hello,
        };
    }
}

/// The cost model.
pub mod tuning {
    pub use crate::config::cost_params::{CostParams, DEFAULT_WRITE_WEIGHT, LinkCost};
    pub use crate::tuning::{Shape, choose_by_model, predict};

    /// The cost-model parameters `config` read from `STREAMCOMM_TUNING_FILE`,
    /// if it names one.
    pub fn tuning_file_params(config: &crate::Config) -> Option<CostParams> {
        config.tuning
    }
}

/// Waiting: spin, yield, sleep.
pub mod wait {
    pub use crate::wait::{DEFAULT_YIELDS, Notifier, WaitError, WaitPolicy};
}

/// Runs `f` on two ranks (threads), each with its own communicator and
/// host stream, and returns the first error: the harness of the API
/// docs' two-rank examples.
///
/// # Errors
/// The first rank's error, or a communicator's creation error.
pub fn on_two_ranks(
    f: impl Fn(&crate::Communicator, &crate::host::HostStream) -> crate::Result<()>
    + Send
    + Sync
    + Clone
    + 'static,
) -> crate::Result<()> {
    let id = crate::bootstrap::UniqueId::new()?;
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                let comm = crate::Communicator::init(&id, rank, 2)?;
                let stream = crate::host::HostStream::new()?;
                f(&comm, &stream)
            })
        })
        .collect();
    let mut first = Ok(());
    for r in ranks {
        let r = r
            .join()
            .unwrap_or_else(|_| Err(crate::Error::Aborted("a rank panicked".into())));
        if first.is_ok() {
            first = r;
        }
    }
    first
}
