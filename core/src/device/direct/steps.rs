//! What one collective is on the direct path: a list of copies, flag rounds
//! and reductions over the ranks' windows, cut into chunks that fit a window.
//!
//! # Why these are not data steps or flag steps
//!
//! Every step here becomes stream operations that the *device* executes,
//! in order, without a host thread: a copy engine transfer, a reduce
//! kernel, or a 32-bit write and wait on a flag word (`cuStreamWriteValue32`
//! / `cuStreamWaitValue32`). That changes what a step can say:
//!
//! - **Fixed flag values.** A captured graph replays the same operations
//!   with the same parameters every time. The host barrier's flags carry
//!   the barrier's epoch ([`streamcomm_algo::barrier::signal_value`]), a value that
//!   differs at every call and so cannot be baked into a replayed graph. A
//!   [`DirectStep::Arrive`] round instead writes the constant 1 and waits for at
//!   least 1, then writes 0 back into its own flag area, so the same nodes are
//!   right at every replay. The reset cannot erase a later raise: a peer
//!   raises the same word again only after a round of another kind (no
//!   plan has the same round twice in a row), which this rank joins only
//!   after its reset. Arrival words are 32 bits because those stream
//!   operations are.
//! - **No slots, no messages.** The windows are device memory mapped by
//!   every rank of the host, so data moves by copies into and out of them
//!   ([`DirectStep::Copy`]) and reductions read every rank's window at once
//!   ([`DirectStep::Reduce`], up to [`MAX_SOURCES`] sources). A
//!   [`crate::plan::DataStep`] moves data through per-peer FIFO slot rings that
//!   a host thread (or the proxy) serves, and a barrier step runs on host
//!   memory with futex wake-ups: neither exists on a device stream.
//! - **One round shape.** The only synchronisation the path needs is
//!   "every rank of the host has reached this point", all-to-all over a
//!   handful of ranks (at most [`MAX_SOURCES`] for a reduction), so there
//!   is no algorithm to choose and nothing for the barrier simulator to
//!   prove beyond what the window's rounds give: *ready*, then *done* per
//!   chunk, with *reduced* between them in the two-shot all-reduce.
//!
//! # Two plans for all-reduce
//!
//! Below [`TWO_SHOT_MIN_BYTES`], or with two ranks, the *one-shot* plan:
//! every rank reads every peer's window in full and reduces it (two
//! rounds a chunk; each rank reads `(n - 1) S` bytes from peers). Above
//! it the *two-shot* plan ([`two_shot_steps`]): reduce-scatter then
//! all-gather through the windows (`2 (n - 1) / n S` bytes from peers),
//! pipelined over the two halves of each window: one flag round a chunk,
//! after which a rank reduces its share of this chunk and gathers the
//! peers' shares of the chunk before, so the reduction of one chunk and
//! the gathering of the previous one share a round, and a rank that is
//! ahead copies in its next chunk while its peers still read the last.
//! The stand-in counts the bytes each process reads through imported
//! windows, and `core/tests/cuda/traffic.rs` holds the two-shot plan to
//! `1.15 x 2 (n - 1) / n S` for 2 to 8 ranks. On one stream the copy-in,
//! the rounds and the reduction still run one after another *on a rank*;
//! what the halves remove is two of every three rounds and the wait for
//! the slowest rank's gathering before the next chunk's copy-in.
//!
//! Every plan here is run for 2 to 8 ranks under random interleavings by
//! the model in `steps_tests.rs`, which executes the steps over simulated
//! windows and flag words with the device's rules (a round raises, then
//! waits for and resets each peer's word) and checks every element.

use super::window::Round;
use crate::device::DevAddr;
use crate::device::call::{DeviceBuffers, DeviceCall, check_separate, stage_lens};
use crate::plan::Collective;
use crate::{Error, Result};

/// Most sources one reduction reads (the reduce kernel's limit): the direct
/// path reduces over at most this many ranks.
pub(crate) const MAX_SOURCES: usize = 8;

/// One step, enqueued in order on the caller's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DirectStep {
    /// Copy `bytes` from `src` to `dst`.
    Copy {
        /// Destination.
        dst: DevAddr,
        /// Source.
        src: DevAddr,
        /// Length in bytes.
        bytes: usize,
    },
    /// Raise this rank's word of `round` in every peer's flag area, then wait
    /// for (and reset) every peer's word in this rank's flag area.
    Arrive(Round),
    /// `dst = op(srcs...)` over `count` elements, for every `dst` of `dsts`.
    Reduce {
        /// One source per rank, in rank order.
        srcs: Vec<DevAddr>,
        /// Destinations (the caller's buffer, and this rank's window where
        /// peers read the result).
        dsts: Vec<DevAddr>,
        /// Elements.
        count: usize,
    },
}

/// Where the windows of a communicator's ranks are: all that a plan needs
/// of them ([`super::window::Windows`] on a device, a model in the tests).
pub(crate) trait WindowLayout {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Data bytes of each window.
    fn capacity(&self) -> usize;
    /// The data area of `owner`'s window.
    fn data(&self, owner: usize) -> DevAddr;
}

/// The caller's buffers of one call: where this rank reads its input and
/// writes its output (`None` where the collective does not, on this rank).
struct Ends {
    send: Option<DevAddr>,
    recv: Option<DevAddr>,
}

/// Checks `call`'s buffers against its collective and resolves NCCL's
/// in-place offsets. Same rules as the staged path.
fn ends(call: &DeviceCall, rank: usize, size: usize, count: usize) -> Result<Ends> {
    let esz = call.dtype.size() as u64;
    let (send_len, recv_len) = stage_lens(call.collective, count, size)?;
    let at = |addr: DevAddr, elems: usize| addr + elems as u64 * esz;
    Ok(match call.buffers {
        DeviceBuffers::None => Ends {
            send: None,
            recv: None,
        },
        DeviceBuffers::InPlace(b) => match call.collective {
            Collective::AllGather => Ends {
                send: Some(at(b.addr, rank * count)),
                recv: Some(b.addr),
            },
            Collective::ReduceScatter => Ends {
                send: Some(b.addr),
                recv: Some(at(b.addr, rank * count)),
            },
            _ => Ends {
                send: Some(b.addr),
                recv: Some(b.addr),
            },
        },
        DeviceBuffers::Separate { send, recv } => {
            let (reads, writes) = check_separate(call, rank, send, recv, send_len, recv_len)?;
            Ends {
                send: reads.then_some(send.addr),
                recv: writes.then_some(recv.addr),
            }
        }
    })
}

/// The steps of `call` over `w`, or `None` when the direct path does not
/// take it (a reduction over more than [`MAX_SOURCES`] ranks, or a window
/// too small for one chunk of every rank's blocks).
pub(crate) fn direct_steps(
    call: &DeviceCall,
    w: &impl WindowLayout,
) -> Result<Option<Vec<DirectStep>>> {
    let (rank, size) = (w.rank(), w.size());
    if let Collective::Broadcast { root } | Collective::Reduce { root } = call.collective
        && root >= size
    {
        return Err(Error::invalid(format!(
            "{}: root {root} is not a rank of {size}",
            call.collective.name()
        )));
    }
    let count = call.count(size)?;
    let ends = ends(call, rank, size, count)?;
    let collective = call.collective;
    let reduces = matches!(
        collective,
        Collective::AllReduce | Collective::Reduce { .. } | Collective::ReduceScatter
    );
    if reduces && size > MAX_SOURCES {
        return Ok(None);
    }
    if count == 0 || collective == Collective::Barrier {
        return Ok(Some(vec![
            DirectStep::Arrive(Round::Ready),
            DirectStep::Arrive(Round::Done),
        ]));
    }
    let esz = call.dtype.size();
    if collective == Collective::AllReduce
        && two_shot(size, count * esz)
        && two_shot_chunk(w.capacity(), esz, size) > 0
    {
        return Ok(Some(two_shot_steps(w, esz, count, &ends)));
    }
    // Blocks per window: one per rank where every rank sends every rank its own.
    let blocks = match collective {
        Collective::ReduceScatter | Collective::AllToAll => size,
        _ => 1,
    };
    // Chunks of whole 16-element groups keep every block 16-byte aligned.
    let chunk = w.capacity() / (blocks * esz) / 16 * 16;
    if chunk == 0 {
        return Ok(None);
    }
    let (send, recv) = (ends.send.unwrap_or(0), ends.recv.unwrap_or(0));
    let el = |base: DevAddr, i: usize| base + (i * esz) as u64;
    let mut steps = Vec::new();
    for o in (0..count).step_by(chunk) {
        let k = chunk.min(count - o);
        let bytes = k * esz;
        let copy = |dst, src| DirectStep::Copy { dst, src, bytes };
        // The same block of every rank's window.
        let all = |block: usize| (0..size).map(|p| el(w.data(p), block * k)).collect();
        let mine = w.data(rank);
        match collective {
            Collective::AllReduce | Collective::Reduce { .. } => {
                steps.push(copy(mine, el(send, o)));
                steps.push(DirectStep::Arrive(Round::Ready));
                if ends.recv.is_some() {
                    steps.push(DirectStep::Reduce {
                        srcs: all(0),
                        dsts: vec![el(recv, o)],
                        count: k,
                    });
                }
            }
            Collective::Broadcast { root } => {
                if rank == root {
                    steps.push(copy(mine, el(send, o)));
                }
                steps.push(DirectStep::Arrive(Round::Ready));
                if rank != root {
                    steps.push(copy(el(recv, o), w.data(root)));
                } else if send != recv {
                    steps.push(copy(el(recv, o), el(send, o)));
                }
            }
            Collective::AllGather => {
                steps.push(copy(mine, el(send, o)));
                steps.push(DirectStep::Arrive(Round::Ready));
                for p in 0..size {
                    steps.push(copy(el(recv, p * count + o), w.data(p)));
                }
            }
            Collective::ReduceScatter => {
                for p in 0..size {
                    steps.push(copy(el(mine, p * k), el(send, p * count + o)));
                }
                steps.push(DirectStep::Arrive(Round::Ready));
                steps.push(DirectStep::Reduce {
                    srcs: all(rank),
                    dsts: vec![el(recv, o)],
                    count: k,
                });
            }
            Collective::AllToAll => {
                for p in 0..size {
                    steps.push(copy(el(mine, p * k), el(send, p * count + o)));
                }
                steps.push(DirectStep::Arrive(Round::Ready));
                for p in 0..size {
                    steps.push(copy(el(recv, p * count + o), el(w.data(p), rank * k)));
                }
            }
            Collective::Barrier => unreachable!("handled above"),
        }
        steps.push(DirectStep::Arrive(Round::Done));
    }
    Ok(Some(steps))
}

/// Where an `all_gatherv`'s (or a gather's) blocks are: this rank's input
/// and the output (device addresses), and every rank's count and
/// displacement in the output, in elements of `esz` bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GathervLayout<'a> {
    /// This rank's block (`counts[rank]` elements).
    pub(crate) send: DevAddr,
    /// The output, where rank `p`'s block starts at element `displs[p]`.
    pub(crate) recv: DevAddr,
    /// Elements of each rank's block.
    pub(crate) counts: &'a [usize],
    /// Where each rank's block goes in the output.
    pub(crate) displs: &'a [usize],
    /// Bytes of an element.
    pub(crate) esz: usize,
    /// The one rank that receives (a gather's root), or `None` when every
    /// rank does (`all_gatherv`).
    pub(crate) only_to: Option<usize>,
}

/// Where a scatter's blocks are: the root's input (`size` blocks of
/// `count` elements of `esz` bytes) and this rank's output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScatterLayout {
    /// The root's input (not read elsewhere).
    pub(crate) send: DevAddr,
    /// This rank's block of the output.
    pub(crate) recv: DevAddr,
    /// Elements of each block.
    pub(crate) count: usize,
    /// The sending rank.
    pub(crate) root: usize,
    /// Bytes of an element.
    pub(crate) esz: usize,
}

/// A collective made of sends and receives that the direct path runs
/// through the windows. (An all_to_allv's counts differ between pairs and
/// no rank knows them all, so the ranks could not agree on the rounds: it
/// stays a group.)
#[derive(Clone, Copy, Debug)]
pub(crate) enum DirectExchange<'a> {
    /// An `all_gatherv`, or a gather.
    Gather(GathervLayout<'a>),
    /// A scatter.
    Scatter(ScatterLayout),
}

/// The steps of `x` over the windows `w`, or `None` where a window is too
/// small for the exchange's chunks (a scatter cuts the root's window into
/// one part per rank, each of at least 256 bytes).
pub(crate) fn exchange_steps(
    w: &impl WindowLayout,
    x: &DirectExchange<'_>,
) -> Option<Vec<DirectStep>> {
    if w.capacity() / w.size() < 256 {
        return None;
    }
    Some(match x {
        DirectExchange::Gather(g) => gather_steps(w, g),
        DirectExchange::Scatter(s) => scatter_steps(w, s),
    })
}

/// Rounds of `chunk` bytes that move `largest` bytes (none for one rank,
/// which has no peer to wait for).
fn rounds(size: usize, largest: usize, chunk: usize) -> usize {
    if size > 1 {
        largest.div_ceil(chunk.max(1))
    } else {
        0
    }
}

/// The gather over the windows: the receiving rank's own block is copied
/// straight into its output; then, per chunk of at most a window (the
/// same number of chunks on every rank, from the largest block), every
/// rank copies its block's chunk into its window; *ready*; each receiving
/// rank copies every peer's chunk out of the peer's window into its
/// place; *done*. Each block is read once from its window by each
/// receiver, as the group of sends and receives would move it, without
/// host memory.
fn gather_steps(w: &impl WindowLayout, g: &GathervLayout<'_>) -> Vec<DirectStep> {
    let (rank, size) = (w.rank(), w.size());
    let receives = g.only_to.is_none_or(|root| root == rank);
    let at = |base: DevAddr, bytes: usize| base + bytes as u64;
    let bytes_of = |p: usize| g.counts[p] * g.esz;
    let place = |p: usize| at(g.recv, g.displs[p] * g.esz);
    let mut steps = Vec::new();
    if receives && bytes_of(rank) > 0 {
        steps.push(DirectStep::Copy {
            dst: place(rank),
            src: g.send,
            bytes: bytes_of(rank),
        });
    }
    // Whole 256-byte units a round: every chunk starts aligned.
    let chunk = w.capacity() / 256 * 256;
    let largest = (0..size).map(bytes_of).max().unwrap_or(0);
    // The part of rank `p`'s block that round `c` moves.
    let part = |p: usize, c: usize| {
        let off = c * chunk;
        (off, bytes_of(p).saturating_sub(off).min(chunk))
    };
    for c in 0..rounds(size, largest, chunk) {
        let (off, bytes) = part(rank, c);
        if bytes > 0 {
            steps.push(DirectStep::Copy {
                dst: w.data(rank),
                src: at(g.send, off),
                bytes,
            });
        }
        steps.push(DirectStep::Arrive(Round::Ready));
        for p in (0..size).filter(|&p| p != rank && receives) {
            let (off, bytes) = part(p, c);
            if bytes > 0 {
                steps.push(DirectStep::Copy {
                    dst: at(place(p), off),
                    src: w.data(p),
                    bytes,
                });
            }
        }
        steps.push(DirectStep::Arrive(Round::Done));
    }
    steps
}

/// The scatter over the windows: the root copies its own block straight
/// into its output; then, per chunk (the root's window cut into one part
/// per rank), the root copies each peer's chunk into that peer's part of
/// its window; *ready*; each peer copies its chunk out; *done*.
fn scatter_steps(w: &impl WindowLayout, s: &ScatterLayout) -> Vec<DirectStep> {
    let (rank, size) = (w.rank(), w.size());
    let at = |base: DevAddr, bytes: usize| base + bytes as u64;
    let block = s.count * s.esz;
    let mut steps = Vec::new();
    if rank == s.root && block > 0 {
        steps.push(DirectStep::Copy {
            dst: s.recv,
            src: at(s.send, rank * block),
            bytes: block,
        });
    }
    // Each rank's part of the root's window, in whole 256-byte units.
    let chunk = w.capacity() / size / 256 * 256;
    for c in 0..rounds(size, block, chunk) {
        let off = c * chunk;
        let bytes = block.saturating_sub(off).min(chunk);
        let slot = |p: usize| at(w.data(s.root), p * chunk);
        if rank == s.root {
            for p in (0..size).filter(|&p| p != rank) {
                steps.push(DirectStep::Copy {
                    dst: slot(p),
                    src: at(s.send, p * block + off),
                    bytes,
                });
            }
        }
        steps.push(DirectStep::Arrive(Round::Ready));
        if rank != s.root {
            steps.push(DirectStep::Copy {
                dst: at(s.recv, off),
                src: slot(rank),
                bytes,
            });
        }
        steps.push(DirectStep::Arrive(Round::Done));
    }
    steps
}

/// Smallest all-reduce, in bytes, that takes the two-shot plan (where more
/// than two ranks take part): below it the one-shot plan's two flag rounds
/// cost less than the bytes the third round saves.
pub(crate) const TWO_SHOT_MIN_BYTES: usize = 256 << 10;

/// True when an all-reduce of `bytes` over `size` ranks takes the two-shot
/// plan. With two ranks both plans read the same bytes from the peer.
pub(crate) fn two_shot(size: usize, bytes: usize) -> bool {
    size > 2 && bytes >= TWO_SHOT_MIN_BYTES
}

/// Bytes of each half of a window of `capacity` bytes that the two-shot
/// plan uses (the second half starts 256-byte aligned).
fn half_bytes(capacity: usize) -> usize {
    capacity / 2 / 256 * 256
}

/// Elements of one two-shot chunk for `size` ranks in windows of
/// `capacity` bytes: a chunk of input and one rank's share of its result
/// fit in half a window, and shares are whole 16-element groups (16-byte
/// aligned).
pub(crate) fn two_shot_chunk(capacity: usize, esz: usize, size: usize) -> usize {
    let unit = 16 * size;
    half_bytes(capacity) / esz * size / (size + 1) / unit * unit
}

/// The two-shot all-reduce (reduce-scatter, then all-gather, through the
/// windows), pipelined over the windows' two halves. Chunk `j` (of `k`
/// elements) uses half `j % 2` of every window: its input first, then the
/// owner's share of the result (`k / size`, in whole 16-element groups).
/// Round `j` (`0..=m` for `m` chunks) says "my input of chunk `j` is in my
/// window, and my share of chunk `j - 1` is reduced in it":
///
/// ```text
/// copy in 0 | round 0 | reduce 0 |
/// copy in 1 | round 1 | reduce 1, gather 0 |
///   ...
/// copy in j | round j | reduce j, gather j - 1 |
///   ...
///           | round m |           gather m - 1 | done
/// ```
///
/// Each rank reads `2 (n - 1) / n` of the bytes from peers, where the
/// one-shot plan reads `n - 1` times them. Why no write overtakes a read:
/// a rank writes the input part of half `j % 2` (copy in `j`) after round
/// `j - 1`, which every peer raised after its last read of it (reduce
/// `j - 2`); and the share part (reduce `j`) after round `j`, which every
/// peer raised after its last read of it (gather `j - 2`, before copy in
/// `j`). The final *done* round keeps the next call's writes behind the
/// last gathering. Rounds alternate *ready* and *reduced* (both mean the
/// same here): a round never follows itself, which the flags' fixed
/// values need (module docs of [`super`]).
fn two_shot_steps(w: &impl WindowLayout, esz: usize, count: usize, ends: &Ends) -> Vec<DirectStep> {
    let (rank, size) = (w.rank(), w.size());
    let chunk = two_shot_chunk(w.capacity(), esz, size);
    let half = half_bytes(w.capacity()) as u64;
    let (send, recv) = (ends.send.unwrap_or(0), ends.recv.unwrap_or(0));
    let el = |base: DevAddr, i: usize| base + (i * esz) as u64;
    // Where chunk `j`'s input and rank `p`'s share of its result sit.
    let input_at = |p: usize, j: usize| w.data(p) + (j as u64 % 2) * half;
    let share_at = |p: usize, j: usize| el(input_at(p, j), chunk);
    // The elements `[lo, hi)` of a chunk of `k` that rank `p` reduces.
    let share = |p: usize, k: usize| {
        let part = k.div_ceil(size).div_ceil(16) * 16;
        let lo = (p * part).min(k);
        (lo, (lo + part).min(k))
    };
    let chunks = count.div_ceil(chunk);
    let at = |j: usize| (j * chunk, chunk.min(count - j * chunk));
    let mut steps = Vec::new();
    for j in 0..=chunks {
        if j < chunks {
            let (o, k) = at(j);
            steps.push(DirectStep::Copy {
                dst: input_at(rank, j),
                src: el(send, o),
                bytes: k * esz,
            });
        }
        steps.push(DirectStep::Arrive(if j % 2 == 0 {
            Round::Ready
        } else {
            Round::Reduced
        }));
        if j < chunks {
            let (o, k) = at(j);
            let (lo, hi) = share(rank, k);
            if hi > lo {
                steps.push(DirectStep::Reduce {
                    srcs: (0..size).map(|p| el(input_at(p, j), lo)).collect(),
                    dsts: vec![el(recv, o + lo), share_at(rank, j)],
                    count: hi - lo,
                });
            }
        }
        if j > 0 {
            let (o, k) = at(j - 1);
            for p in (0..size).filter(|&p| p != rank) {
                let (lo, hi) = share(p, k);
                if hi > lo {
                    steps.push(DirectStep::Copy {
                        dst: el(recv, o + lo),
                        src: share_at(p, j - 1),
                        bytes: (hi - lo) * esz,
                    });
                }
            }
        }
    }
    steps.push(DirectStep::Arrive(Round::Done));
    steps
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
