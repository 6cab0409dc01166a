//! Stage 1 of creation: this rank's local resources (see [`super`]).

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use crate::bootstrap::{Bootstrap, UniqueId};
use crate::comm::endpoint::{self, Endpoint, local_host_id};
use crate::config::{Config, Transport, TransportChoice};
use crate::transport::RdmaDevice;
use crate::transport::Segment;
use crate::transport::fault::FaultInjector;
use crate::transport::ring::RingShape;
use crate::transport::tcp::setup;
use crate::{Error, Result};

/// What this rank brings to the communicator, before it meets the others.
pub(crate) struct Local {
    pub rank: usize,
    pub size: usize,
    pub config: Config,
    pub faults: FaultInjector,
    pub shape: RingShape,
    pub device: RdmaDevice,
    pub boot: Bootstrap,
    pub segment: Segment,
    /// The tcp listener, unless told to use shared memory only (taken by
    /// the connect stage).
    pub listener: Option<(TcpListener, SocketAddr)>,
    /// Where the survivors of a failure meet to shrink the communicator
    /// (none for a communicator of one rank).
    pub recovery: Option<(TcpListener, SocketAddr)>,
    /// Where this rank answers its verbs peers' handshakes (with an RDMA
    /// device only; taken by the connect stage).
    pub verbs_shake: Option<(TcpListener, SocketAddr)>,
    /// The secret of the id the communicator was created from, which
    /// admits the ranks to each other's recovery listener.
    pub secret: [u8; 16],
    /// This rank's endpoint, as the others will see it.
    pub me: Endpoint,
}

/// Validates the request and the configuration, opens the RDMA device,
/// joins the bootstrap, creates the segment and the tcp listener.
///
/// # Errors
/// [`Error::InvalidArgument`] for `size == 0`, `rank >= size` or a bad
/// configuration; as the bootstrap, the device, shared memory and sockets.
pub(crate) fn prepare(id: &UniqueId, rank: usize, size: usize, config: Config) -> Result<Local> {
    if size == 0 {
        return Err(Error::invalid("communicator size must be at least 1"));
    }
    if rank >= size {
        return Err(Error::invalid(format!(
            "rank {rank} out of range for size {size}"
        )));
    }
    config.validate()?;
    let faults = FaultInjector::new(&config.faults, rank, size)?;
    let shape = RingShape {
        nsteps: config.nsteps,
        slot_bytes: config.slot_bytes(),
    };
    let timeout = config.timeout.min(Duration::from_secs(120));
    let device = RdmaDevice::open(&config, size)?;
    let boot = Bootstrap::connect(id, rank, size, timeout)?;
    let segment = Segment::create(size, shape)?;
    // Listen for tcp unless told to use shared memory only.
    let ip = || match &config.socket_ifname {
        Some(name) => setup::interface_addr(name),
        None => boot.local_addr().map(|a| a.ip()),
    };
    let listener = match config.transport {
        TransportChoice::Only(Transport::Shm) => None,
        _ if size == 1 => None,
        _ => Some(setup::listen(ip()?)?),
    };
    // The survivors of a failure reach each other here, whatever the
    // transports (see `comm::recovery`).
    let recovery = match size {
        1 => None,
        _ => Some(setup::listen(ip()?)?),
    };
    // Verbs peers make their queue pairs at first use, meeting here.
    let verbs_shake = match device.is_open() {
        true => Some(setup::listen(ip()?)?),
        false => None,
    };
    let me = Endpoint {
        host: local_host_id(),
        pid: std::process::id(),
        shm_name: segment.name().to_string(),
        shape,
        shm_budget: config.shm_budget as u64,
        tcp: listener.as_ref().map(|(_, addr)| *addr),
        verbs: match (device.is_open(), config.transport) {
            (false, _) => endpoint::VERBS_NONE,
            (true, TransportChoice::Only(Transport::Verbs)) => endpoint::VERBS_FORCED,
            (true, _) => endpoint::VERBS_AVAILABLE,
        },
        verbs_atomics: device.atomics(),
        recovery: recovery.as_ref().map(|(_, addr)| *addr),
        verbs_shake: verbs_shake.as_ref().map(|(_, addr)| *addr),
    };
    Ok(Local {
        rank,
        size,
        config,
        faults,
        shape,
        device,
        boot,
        segment,
        listener,
        recovery,
        verbs_shake,
        secret: *id.secret(),
        me,
    })
}
