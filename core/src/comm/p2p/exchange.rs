//! Collectives made of sends and receives: `gather`, `scatter`,
//! `all_to_allv` and `all_gatherv`. Every face that has them (host streams,
//! CUDA streams, the C API) builds one [`Exchange`], and [`Exchange::lower`]
//! checks it against the buffers and turns it into this rank's
//! [`Transfer`]s, which the face posts as one group on its buffers. The
//! rules of each call (counts, roots, regions, the messages that name what
//! was wrong) live here once; a face adds only the mapping from a region
//! to its memory.

use super::Dir;
use crate::{Error, Result};

/// One collective made of sends and receives, as a call describes it.
/// Counts and displacements are in elements.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Exchange<'a> {
    /// `count` elements from every rank into block `j` (rank `j`'s) of the
    /// root's receive buffer (`MPI_Gather`).
    Gather {
        /// The receiving rank.
        root: usize,
        /// Elements each rank sends.
        count: usize,
    },
    /// Block `j` of the root's send buffer (`count` elements) to rank `j`
    /// (`MPI_Scatter`).
    Scatter {
        /// The sending rank.
        root: usize,
        /// Elements each rank receives.
        count: usize,
    },
    /// Elements `send_displs[j]..+send_counts[j]` to rank `j`, which stores
    /// them at `recv_displs[rank]..+recv_counts[rank]` (`MPI_Alltoallv`).
    AllToAllv {
        /// Elements to each rank.
        send_counts: &'a [usize],
        /// Where each rank's elements start in the send buffer.
        send_displs: &'a [usize],
        /// Elements from each rank (at least what it sends).
        recv_counts: &'a [usize],
        /// Where each rank's elements go in the receive buffer.
        recv_displs: &'a [usize],
    },
    /// Every rank's send buffer (`counts[rank]` elements) into
    /// `displs[rank]..` of every rank's receive buffer (`MPI_Allgatherv`).
    AllGatherv {
        /// Elements each rank contributes.
        counts: &'a [usize],
        /// Where each rank's elements go in the receive buffer.
        displs: &'a [usize],
    },
}

/// One send or receive of an exchange: elements `offset..offset + count`
/// of the send buffer (a send) or the receive buffer (a receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// Send or receive.
    pub(crate) dir: Dir,
    /// The other rank (this rank itself for its own block: the group pairs
    /// it with the matching receive and copies).
    pub(crate) peer: usize,
    /// First element of the region.
    pub(crate) offset: usize,
    /// Elements.
    pub(crate) count: usize,
}

impl Exchange<'_> {
    /// The call's name, as errors and traces print it.
    pub(crate) fn call(&self) -> &'static str {
        match self {
            Exchange::Gather { .. } => "gather",
            Exchange::Scatter { .. } => "scatter",
            Exchange::AllToAllv { .. } => "all_to_allv",
            Exchange::AllGatherv { .. } => "all_gatherv",
        }
    }

    /// The group's name (the call, and its root where it has one).
    pub(crate) fn name(&self) -> String {
        match self {
            Exchange::Gather { root, .. } | Exchange::Scatter { root, .. } => {
                format!("{} root {root}", self.call())
            }
            _ => self.call().to_string(),
        }
    }

    /// Whether `rank` reads its send buffer and writes its receive buffer
    /// in this call: a gather's receive buffer is the root's alone, a
    /// scatter's send buffer too (the CUDA face then touches no other
    /// rank's, so cudarc's tracking records no use of it).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn uses(&self, rank: usize) -> (bool, bool) {
        match *self {
            Exchange::Gather { root, .. } => (true, rank == root),
            Exchange::Scatter { root, .. } => (rank == root, true),
            _ => (true, true),
        }
    }

    /// This rank's transfers, after checking the call against a send
    /// buffer of `send_len` and a receive buffer of `recv_len` elements
    /// (a buffer the rank does not use, such as a non-root's receive buffer
    /// of a gather, is not checked). In pairwise order, as every face
    /// posts them: round `k` sends to `rank + k` and receives from
    /// `rank - k`, so that ranks work on distinct pairs at any moment.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the call and what was wrong: a root
    /// out of range, a list that is not one entry per rank, a send buffer
    /// that is not this rank's count, a region outside its buffer.
    pub(crate) fn lower(
        &self,
        rank: usize,
        size: usize,
        send_len: usize,
        recv_len: usize,
    ) -> Result<Vec<Transfer>> {
        let call = self.call();
        let t = |dir, peer, offset, count| Transfer {
            dir,
            peer,
            offset,
            count,
        };
        let pairs = (0..size).map(|k| ((rank + k) % size, (rank + size - k) % size));
        match *self {
            Exchange::Gather { root, count } | Exchange::Scatter { root, count } => {
                if root >= size {
                    return Err(Error::invalid(format!(
                        "{call}: root {root} is out of range for {size} ranks"
                    )));
                }
                let gather = matches!(self, Exchange::Gather { .. });
                // The root's buffer of every block, and this rank's block.
                let (blocks, block_dir, one_dir) = if gather {
                    (("recv", recv_len), Dir::Recv, Dir::Send)
                } else {
                    (("send", send_len), Dir::Send, Dir::Recv)
                };
                let mut out = Vec::with_capacity(size + 1);
                if rank == root {
                    let (what, len) = blocks;
                    let all = count.checked_mul(size);
                    if all.is_none_or(|all| len < all) {
                        return Err(Error::invalid(format!(
                            "{call}: {what} holds {len} elements, the root needs size x count \
                             = {size} x {count} = {}",
                            size as u128 * count as u128
                        )));
                    }
                    for (to, from) in pairs {
                        let p = if gather { from } else { to };
                        out.push(t(block_dir, p, p * count, count));
                    }
                }
                out.push(t(one_dir, root, 0, count));
                Ok(out)
            }
            Exchange::AllToAllv {
                send_counts,
                send_displs,
                recv_counts,
                recv_displs,
            } => {
                one_per_rank(
                    call,
                    size,
                    [
                        ("send_counts", send_counts),
                        ("send_displs", send_displs),
                        ("recv_counts", recv_counts),
                        ("recv_displs", recv_displs),
                    ],
                )?;
                let mut out = Vec::with_capacity(2 * size);
                for (to, from) in pairs {
                    let (o, c) = (send_displs[to], send_counts[to]);
                    inside(call, "send", o, c, send_len)?;
                    out.push(t(Dir::Send, to, o, c));
                    let (o, c) = (recv_displs[from], recv_counts[from]);
                    inside(call, "recv", o, c, recv_len)?;
                    out.push(t(Dir::Recv, from, o, c));
                }
                Ok(out)
            }
            Exchange::AllGatherv { counts, displs } => {
                one_per_rank(call, size, [("counts", counts), ("displs", displs)])?;
                if send_len != counts[rank] {
                    return Err(Error::invalid(format!(
                        "{call}: send holds {send_len} elements, counts[{rank}] says {}",
                        counts[rank]
                    )));
                }
                for p in 0..size {
                    inside(call, "recv", displs[p], counts[p], recv_len)?;
                }
                disjoint(call, counts, displs)?;
                let mut out = Vec::with_capacity(2 * size);
                for (to, from) in pairs {
                    out.push(t(Dir::Send, to, 0, send_len));
                    out.push(t(Dir::Recv, from, displs[from], counts[from]));
                }
                Ok(out)
            }
        }
    }
}

/// Fails unless every list has one entry per rank.
fn one_per_rank<const N: usize>(
    call: &str,
    size: usize,
    lists: [(&str, &[usize]); N],
) -> Result<()> {
    for (what, v) in lists {
        if v.len() != size {
            return Err(Error::invalid(format!(
                "{call}: {what} has {} entries, needs one per rank ({size})",
                v.len()
            )));
        }
    }
    Ok(())
}

/// Fails when two ranks' receive regions (`displs[j]..+counts[j]`, empty
/// ones aside) overlap.
fn disjoint(call: &str, counts: &[usize], displs: &[usize]) -> Result<()> {
    let mut regions: Vec<(usize, usize, usize)> = (0..counts.len())
        .filter(|&j| counts[j] > 0)
        .map(|j| (displs[j], displs[j] + counts[j], j))
        .collect();
    regions.sort_unstable();
    for w in regions.windows(2) {
        let ((_, end, a), (start, _, b)) = (w[0], w[1]);
        if start < end {
            return Err(Error::invalid(format!(
                "{call}: the recv regions of ranks {a} and {b} overlap"
            )));
        }
    }
    Ok(())
}

/// Fails unless elements `offset..offset + count` lie in a buffer of `len`.
fn inside(call: &str, what: &str, offset: usize, count: usize, len: usize) -> Result<()> {
    if offset.checked_add(count).is_none_or(|end| end > len) {
        return Err(Error::invalid(format!(
            "{call}: {what} region {offset}..{offset}+{count} lies outside its {len} elements"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(ts: &[Transfer]) -> Vec<(usize, usize, usize)> {
        ts.iter()
            .filter(|t| t.dir == Dir::Send)
            .map(|t| (t.peer, t.offset, t.count))
            .collect()
    }

    fn recvs(ts: &[Transfer]) -> Vec<(usize, usize, usize)> {
        ts.iter()
            .filter(|t| t.dir == Dir::Recv)
            .map(|t| (t.peer, t.offset, t.count))
            .collect()
    }

    #[test]
    fn all_gatherv_sends_the_whole_buffer_to_everyone_and_receives_each_block_where_it_goes() {
        let (counts, displs) = ([2, 0, 3], [5, 0, 1]);
        let x = Exchange::AllGatherv {
            counts: &counts,
            displs: &displs,
        };
        let ts = x.lower(2, 3, 3, 7).unwrap();
        assert_eq!(sends(&ts), [(2, 0, 3), (0, 0, 3), (1, 0, 3)]);
        assert_eq!(recvs(&ts), [(2, 1, 3), (1, 0, 0), (0, 5, 2)]);
    }

    #[test]
    fn all_gatherv_names_what_is_wrong() {
        let err = |counts: &[usize], displs: &[usize], send: usize, recv: usize| {
            Exchange::AllGatherv { counts, displs }
                .lower(1, 2, send, recv)
                .unwrap_err()
                .to_string()
        };
        assert!(
            err(&[1], &[0, 1], 1, 2)
                .contains("all_gatherv: counts has 1 entries, needs one per rank (2)")
        );
        assert!(
            err(&[1, 2], &[0, 1], 1, 3)
                .contains("all_gatherv: send holds 1 elements, counts[1] says 2")
        );
        assert!(
            err(&[1, 2], &[0, 2], 2, 3)
                .contains("all_gatherv: recv region 2..2+2 lies outside its 3 elements")
        );
        assert!(err(&[1, 2], &[usize::MAX, 1], 2, 3).contains("lies outside"));
        assert!(err(&[2, 2], &[1, 0], 2, 4).contains("the recv regions of ranks 1 and 0 overlap"));
        // Empty regions overlap nothing.
        assert!(
            Exchange::AllGatherv {
                counts: &[0, 2],
                displs: &[1, 0]
            }
            .lower(1, 2, 2, 2)
            .is_ok()
        );
    }

    #[test]
    fn gather_and_scatter_use_the_roots_buffer_of_blocks_on_the_root_only() {
        let g = Exchange::Gather { root: 1, count: 4 };
        assert_eq!(g.name(), "gather root 1");
        // A non-root sends its block and ignores its receive buffer.
        let ts = g.lower(0, 3, 4, 0).unwrap();
        assert_eq!((sends(&ts), recvs(&ts)), (vec![(1, 0, 4)], vec![]));
        let ts = g.lower(1, 3, 4, 12).unwrap();
        assert_eq!(recvs(&ts), [(1, 4, 4), (0, 0, 4), (2, 8, 4)]);
        let short = g.lower(1, 3, 4, 11).unwrap_err().to_string();
        assert!(
            short.contains(
                "gather: recv holds 11 elements, the root needs size x count = 3 x 4 = 12"
            )
        );
        let s = Exchange::Scatter { root: 0, count: 2 };
        let ts = s.lower(0, 2, 4, 2).unwrap();
        assert_eq!(
            (sends(&ts), recvs(&ts)),
            (vec![(0, 0, 2), (1, 2, 2)], vec![(0, 0, 2)])
        );
        let far = Exchange::Scatter { root: 2, count: 2 }.lower(0, 2, 4, 2);
        assert!(
            far.unwrap_err()
                .to_string()
                .contains("scatter: root 2 is out of range for 2 ranks")
        );
        let huge = Exchange::Gather {
            root: 0,
            count: usize::MAX,
        }
        .lower(0, 2, 1, 1);
        assert!(huge.unwrap_err().to_string().contains("the root needs"));
    }

    #[test]
    fn all_to_allv_checks_every_list_and_region() {
        let x = Exchange::AllToAllv {
            send_counts: &[1, 2],
            send_displs: &[0, 1],
            recv_counts: &[3, 1],
            recv_displs: &[0, 3],
        };
        let ts = x.lower(1, 2, 3, 4).unwrap();
        assert_eq!(sends(&ts), [(1, 1, 2), (0, 0, 1)]);
        assert_eq!(recvs(&ts), [(1, 3, 1), (0, 0, 3)]);
        let out = x.lower(1, 2, 2, 4).unwrap_err().to_string();
        assert!(
            out.contains("all_to_allv: send region 1..1+2 lies outside its 2 elements"),
            "{out}"
        );
        let short = Exchange::AllToAllv {
            send_counts: &[1],
            send_displs: &[0, 1],
            recv_counts: &[3, 1],
            recv_displs: &[0, 3],
        };
        let e = short.lower(0, 2, 3, 4).unwrap_err().to_string();
        assert!(e.contains("all_to_allv: send_counts has 1 entries, needs one per rank (2)"));
    }
}
