//! GPUDirect RDMA end to end on the emulated device over a real RDMA
//! device (the Soft-RoCE guest: `scripts/verbs-check.sh`): the probe's
//! fallbacks, device groups whose bytes the NIC moves straight from and
//! into "device" memory (host memory here, registered the way
//! nvidia-peermem registers device memory), the flush before the stream
//! proceeds, and the clear error when a peer sends eagerly into device
//! memory. Where no RDMA device exists, only the no-verbs-peer case runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::DeviceShared;
use super::gpudirect_probe::{ProbeMemory, establish, wanted};
use super::tests::{POISON, Rank, assert_no_errors, check_received, input, p2p};
use crate::bootstrap::UniqueId;
use crate::comm::p2p::Dir;
use crate::config::{Transport, TransportChoice};
use crate::host::{HostBuffer, HostStream};
use crate::transport::device_span::{GpuDirectMode, NicAccess};
use crate::{Communicator, Config, Error, Result};

/// True where an RDMA device is active and this build has the verbs
/// transport to reach it; otherwise says the test skipped (the Soft-RoCE
/// guest runs it: `scripts/verbs-check.sh`).
fn rdma_here() -> bool {
    let here = streamcomm_testkit::rdma_device(crate::transport::gpudirect_nic::VERBS_BUILT);
    if !here {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "no active RDMA device on this host (scripts/verbs-check.sh runs it in the Soft-RoCE guest)",
        );
    }
    here
}

/// The emulated device's memory as the NIC sees it: host memory, which
/// `ibv_reg_mr` takes as nvidia-peermem makes it take device memory.
#[derive(Default)]
struct EmulatedNic {
    flushes: AtomicUsize,
    /// A buffer the NIC cannot reach (as memory-pool memory may be on a
    /// GPU), 0 for none.
    unreachable: std::sync::atomic::AtomicU64,
}

impl NicAccess for EmulatedNic {
    fn mode(&self) -> GpuDirectMode {
        GpuDirectMode::PeerMem
    }

    fn export_dmabuf(&self, _: u64, _: usize) -> Result<std::os::fd::OwnedFd> {
        Err(Error::Unavailable(
            "the emulated device exports no dma-buf".into(),
        ))
    }

    fn reaches(&self, addr: u64) -> bool {
        addr != self.unreachable.load(Ordering::Relaxed)
    }

    fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn no_dmabuf(_: u64, _: usize) -> Result<std::os::fd::OwnedFd> {
    Err(Error::Unavailable("no dma-buf exporter here".into()))
}

/// One rank: the emulated device's rank, and its NIC access where
/// GPUDirect was set up.
struct GdrRank {
    rank: Rank,
    nic: Option<Arc<EmulatedNic>>,
}

impl std::ops::Deref for GdrRank {
    type Target = Rank;
    fn deref(&self) -> &Rank {
        &self.rank
    }
}

/// Runs `body` on `n` ranks as threads over `transport`, each with
/// GPUDirect probed on a page-aligned scratch area (peermem as said).
fn on_ranks<T: Send + 'static>(
    n: usize,
    transport: TransportChoice,
    peermem: bool,
    body: impl Fn(&GdrRank) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let id = UniqueId::new().unwrap();
    let body = Arc::new(body);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let body = body.clone();
            std::thread::spawn(move || {
                let config = Config {
                    transport,
                    ..Config::from_env().unwrap()
                };
                let comm = Communicator::builder()
                    .unique_id(&id)
                    .rank(r)
                    .size(n)
                    .config(config)
                    .build()
                    .unwrap();
                let scratch = vec![0u8; 3 << 20];
                let page = 4096;
                let addr = (scratch.as_ptr() as u64).next_multiple_of(page);
                let probe = ProbeMemory {
                    addr,
                    len: 2 << 20,
                    export: &no_dmabuf,
                    peermem,
                };
                let nic = Arc::new(EmulatedNic::default());
                let shared = DeviceShared::new(
                    comm.inner.core.engine().handle().clone(),
                    comm.config().timeout,
                );
                let made = wanted(&comm).and_then(|dev| {
                    establish(&dev, &probe, |mode| {
                        assert_eq!(mode, GpuDirectMode::PeerMem);
                        nic.clone() as Arc<dyn NicAccess>
                    })
                });
                let nic = made.map(|m| {
                    let _ = shared.gpudirect.set(m);
                    nic
                });
                let rank = GdrRank {
                    rank: Rank {
                        comm,
                        stream: HostStream::new().unwrap(),
                        shared,
                    },
                    nic,
                };
                body(&rank)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn gpudirect_is_off_without_verbs_peers_and_without_a_registration_that_works() {
    // Over shared memory no peer moves by RDMA: nothing to probe.
    let off = on_ranks(2, Transport::Shm.into(), true, |rk| rk.nic.is_none());
    assert!(
        off.into_iter().all(|o| o),
        "GPUDirect set up without verbs peers"
    );
    if !rdma_here() {
        return;
    }
    // Neither dma-buf nor peermem: staged, and the probe says why (both).
    let why = on_ranks(2, Transport::Verbs.into(), false, |rk| {
        let dev = super::gpudirect_probe::rdma_device(&rk.comm).expect("a verbs peer");
        let mem = vec![0u8; 1 << 16];
        let r = dev.probe(mem.as_ptr() as u64, mem.len(), &no_dmabuf, false);
        (rk.nic.is_none(), r)
    });
    for (staged, r) in why {
        assert!(staged);
        let e = r.unwrap_err();
        assert!(e.contains("dma-buf") && e.contains("not loaded"), "{e}");
    }
}

#[test]
fn gpudirect_device_groups_move_bytes_by_rdma_only() {
    if !rdma_here() {
        return;
    }
    const N: usize = 3;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks(N, Transport::Verbs.into(), true, move |rk| {
        let r = rk.comm.rank();
        let (right, left) = ((r + 1) % N, (r + N - 1) % N);
        let mut bad = Vec::new();
        let Some(nic) = &rk.nic else {
            return vec![format!("rank {r}: GPUDirect not set up over verbs")];
        };
        let mut before = 0;
        // 0 elements, 100 (eager-sized, sent by rendezvous since the peer
        // may be device memory) and 150,000 (600 KB).
        for len in [0usize, 100, 150_000] {
            if len > 0 && before == 0 {
                before = rk.shared.pool.allocations();
            }
            let out = input(seed ^ len as u64, r, len);
            // Longer than the message: the tail must keep its poison.
            let inb = vec![POISON; len + 9];
            let flushes = nic.flushes.load(Ordering::Relaxed);
            rk.group(&[p2p(Dir::Recv, left, &inb), p2p(Dir::Send, right, &out)])
                .unwrap();
            rk.stream.synchronize().unwrap();
            let want = input(seed ^ len as u64, left, len);
            check_received(&mut bad, r, left, &inb, &want);
            let flushed = nic.flushes.load(Ordering::Relaxed) - flushes;
            // Every receive buffer here holds bytes (9 elements past the
            // message), so every group flushes, even after an empty message
            // (one empty eager slot, which a device receive accepts).
            if flushed != 1 {
                bad.push(format!(
                    "rank {r}: {flushed} flushes after a {len}-element receive"
                ));
            }
        }
        // The NIC moved every non-empty message: no staging memory after
        // the zero-byte call's (at most a completion word per call).
        let stats = rk.comm.p2p_stats();
        let bytes = (100 + 150_000) * 4;
        if stats.recv_direct_bytes != bytes as u64 || stats.sent_direct_bytes != bytes as u64 {
            bad.push(format!("rank {r}: not all bytes went by RDMA: {stats:?}"));
        }
        let staged = rk.shared.pool.allocations() - before;
        if staged > 2 {
            bad.push(format!(
                "rank {r}: {staged} staging allocations for GPUDirect groups"
            ));
        }
        if let Some(e) = rk.comm.async_error() {
            bad.push(format!("rank {r}: {e}"));
        }
        bad
    });
    assert_no_errors(errors);
}

/// A buffer the NIC cannot reach (the driver says it is not GPUDirect RDMA
/// capable: memory-pool memory on a GPU) is staged, in a group whose other
/// buffer still moves by RDMA; the bytes arrive either way.
#[test]
fn gpudirect_stages_a_buffer_the_nic_cannot_reach() {
    if !rdma_here() {
        return;
    }
    const N: usize = 2;
    const LEN: usize = 50_000;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks(N, Transport::Verbs.into(), true, move |rk| {
        let r = rk.comm.rank();
        let peer = 1 - r;
        let Some(nic) = &rk.nic else {
            return vec![format!("rank {r}: GPUDirect not set up over verbs")];
        };
        let out = input(seed, r, LEN);
        let inb = vec![POISON; LEN];
        // The receive buffer is out of the NIC's reach; the send is not.
        nic.unreachable
            .store(inb.as_ptr() as u64, Ordering::Relaxed);
        let (before, flushes) = (
            rk.shared.pool.allocations(),
            nic.flushes.load(Ordering::Relaxed),
        );
        rk.group(&[p2p(Dir::Recv, peer, &inb), p2p(Dir::Send, peer, &out)])
            .unwrap();
        rk.stream.synchronize().unwrap();
        let mut bad = Vec::new();
        check_received(&mut bad, r, peer, &inb, &input(seed, peer, LEN));
        // Staged: host staging memory for it, and no device receive to
        // flush (the NIC wrote host memory).
        if rk.shared.pool.allocations() == before {
            bad.push(format!(
                "rank {r}: no staging memory for the unreachable receive"
            ));
        }
        let flushed = nic.flushes.load(Ordering::Relaxed) - flushes;
        if flushed != 0 {
            bad.push(format!(
                "rank {r}: {flushed} flushes with no device receive"
            ));
        }
        if let Some(e) = rk.comm.async_error() {
            bad.push(format!("rank {r}: {e}"));
        }
        bad
    });
    assert_no_errors(errors);
}

#[test]
fn gpudirect_receive_refuses_an_eager_message_with_a_clear_error() {
    if !rdma_here() {
        return;
    }
    let results = on_ranks(2, Transport::Verbs.into(), true, |rk| {
        if rk.comm.rank() == 0 {
            // A host send (not a device group): small, so eager.
            let buf = HostBuffer::from_slice(&[1.5f32; 16]);
            rk.comm.send(&buf, 1, &rk.stream).unwrap();
            let _ = rk.stream.synchronize();
            None
        } else {
            let inb = vec![POISON; 16];
            rk.group(&[p2p(Dir::Recv, 0, &inb)]).unwrap();
            let _ = rk.stream.synchronize();
            let untouched = inb.iter().all(|x| x.is_nan());
            Some((
                rk.comm.async_error().or(rk.shared.runner.error()),
                untouched,
            ))
        }
    });
    let (err, untouched) = results[1].clone().unwrap();
    let e = err.expect("the device receive failed").to_string();
    assert!(e.contains("device memory"), "{e}");
    assert!(untouched, "the refused bytes reached device memory");
}
