//! The proxy: one thread per communicator that runs work streams hand it.
//!
//! NCCL's proxy drives network transports and rings doorbells that GPU
//! streams wait on. Here it does the same for barriers when
//! [`Progress::Proxy`](crate::config::Progress) is selected: the stream hands
//! the barrier over, the proxy runs the algorithm in issue order, and writes
//! the stream's release doorbell (`1` to go on, [`Doorbell::POISON`] on
//! failure). It is the path the CUDA backend needs (a GPU stream cannot run
//! the algorithm itself) and it is tested on the host backend today.
//!
//! The thread holds only a `Weak` reference to the communicator and ends when
//! the communicator is dropped (its channel closes).

use std::sync::{Arc, Weak};

use crossbeam_channel::{Receiver, Sender};

use crate::comm::inner::CommInner;
use crate::host::{Doorbell, JobMode};
use crate::{Error, Result};

/// Work handed to the proxy.
pub(crate) enum ProxyOp {
    /// Run the barrier for `ticket`, then write `release`.
    Barrier { ticket: u64, release: Doorbell },
}

/// The communicator's end of the proxy channel.
#[derive(Clone, Debug)]
pub(crate) struct ProxyHandle {
    tx: Sender<ProxyOp>,
}

impl ProxyHandle {
    /// Creates the channel; the thread is started by [`ProxyHandle::start`].
    pub(crate) fn channel() -> (ProxyHandle, Receiver<ProxyOp>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (ProxyHandle { tx }, rx)
    }

    /// Starts the proxy thread for `comm`.
    pub(crate) fn start(comm: Weak<CommInner>, rx: Receiver<ProxyOp>, rank: usize) -> Result<()> {
        std::thread::Builder::new()
            .name(format!("streamcomm-proxy-{rank}"))
            .spawn(move || proxy_loop(comm, rx))
            .map(drop)
            .map_err(|e| Error::os("spawn proxy thread", e))
    }

    /// Hands `op` to the proxy.
    pub(crate) fn post(&self, op: ProxyOp) -> Result<()> {
        self.tx
            .send(op)
            .map_err(|_| Error::Aborted("the proxy thread has stopped".into()))
    }
}

fn proxy_loop(comm: Weak<CommInner>, rx: Receiver<ProxyOp>) {
    while let Ok(op) = rx.recv() {
        let Some(comm) = comm.upgrade() else { return };
        match op {
            ProxyOp::Barrier { ticket, release } => {
                let _span = tracing::trace_span!("proxy_barrier", ticket).entered();
                let r =
                    comm.run_ticketed(ticket, JobMode::Run, "barrier", |c| c.run_barrier(ticket));
                release.store(if r.is_ok() { 1 } else { Doorbell::POISON });
            }
        }
        drop(comm);
    }
}

/// Keeps a `Weak` helper close to where it is used.
pub(crate) fn weak(comm: &Arc<CommInner>) -> Weak<CommInner> {
    Arc::downgrade(comm)
}
