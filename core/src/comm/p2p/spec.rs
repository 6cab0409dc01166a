//! A group of point-to-point operations as enqueued: checked once, up front.
//!
//! Every operation names a region of one of the group's buffers. The checks
//! here are what make running the group safe and unambiguous: peers in
//! range, regions inside their buffers, no buffer both sent from and
//! received into, receive regions of one buffer disjoint, and sends to this
//! rank paired with receives from it.
//!
//! An operation on device memory (GPUDirect RDMA) names a [`DeviceSpan`]
//! instead of a region of a buffer: nothing locks or copies it (the device
//! stream orders it), and device groups check their own overlaps.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::comm::buffer::BufView;
use crate::transport::device_span::DeviceSpan;
use crate::{DataType, Error, Result};

/// Direction of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Send,
    Recv,
}

/// One send or receive of a group.
#[derive(Clone, Debug)]
pub(crate) struct OpSpec {
    pub dir: Dir,
    pub peer: usize,
    /// Index into [`GroupSpec::bufs`] (unused for a device operation).
    pub buf: usize,
    /// Byte offset of the region in its buffer.
    pub offset: usize,
    /// Elements in the region (a receive's capacity).
    pub count: usize,
    pub dtype: DataType,
    /// The device memory of an operation the NIC moves (no buffer then).
    pub device: Option<DeviceSpan>,
}

impl OpSpec {
    /// Bytes in the region.
    pub(crate) fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }
}

/// A buffer of the group and whether any operation writes it.
#[derive(Clone, Debug)]
pub(crate) struct GroupBuf {
    pub view: BufView,
    pub written: bool,
}

/// The operations of one group, in posting order. One operation and one
/// buffer are held inline: a single send or receive (`send_host`, the
/// common case) builds its group without touching the heap.
#[derive(Clone, Debug)]
pub(crate) struct GroupSpec {
    /// What error messages call this group (`send to 1`, `all_to_allv`, ...).
    pub name: Cow<'static, str>,
    pub rank: usize,
    pub size: usize,
    pub bufs: SmallVec<[GroupBuf; 1]>,
    pub ops: SmallVec<[OpSpec; 1]>,
    /// Every non-empty message over an RDMA connection goes by rendezvous,
    /// whatever its size: a device group's peer may receive into device
    /// memory, which eager slots cannot fill.
    pub rdma_rendezvous: bool,
}

impl GroupSpec {
    /// An empty group for `rank` of `size`.
    pub(crate) fn new(name: impl Into<Cow<'static, str>>, rank: usize, size: usize) -> GroupSpec {
        GroupSpec {
            name: name.into(),
            rank,
            size,
            bufs: SmallVec::new(),
            ops: SmallVec::new(),
            rdma_rendezvous: false,
        }
    }

    /// Adds an operation on `count` elements of `dtype` in device memory
    /// (`span` holds exactly their bytes) with another rank.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a peer out of range or this rank.
    pub(crate) fn push_device(
        &mut self,
        dir: Dir,
        peer: usize,
        span: DeviceSpan,
        dtype: DataType,
        count: usize,
    ) -> Result<()> {
        if peer >= self.size || peer == self.rank {
            return Err(Error::invalid(format!(
                "{}: a device operation by RDMA with rank {peer} (this is rank {} of {})",
                self.name, self.rank, self.size
            )));
        }
        debug_assert_eq!(span.len, count * dtype.size());
        self.ops.push(OpSpec {
            dir,
            peer,
            buf: usize::MAX,
            offset: 0,
            count,
            dtype,
            device: Some(span),
        });
        Ok(())
    }

    /// Adds an operation on elements `offset..offset + count` of `view`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a peer out of range or a region outside
    /// the buffer.
    pub(crate) fn push(
        &mut self,
        dir: Dir,
        peer: usize,
        view: &BufView,
        offset: usize,
        count: usize,
    ) -> Result<()> {
        let what = match dir {
            Dir::Send => "send to",
            Dir::Recv => "recv from",
        };
        if peer >= self.size {
            return Err(Error::invalid(format!(
                "{}: {what} peer {peer}, which is out of range for {} ranks",
                self.name, self.size
            )));
        }
        if dir == Dir::Recv {
            view.check_writable(&self.name, "recv")?;
        }
        let end = offset.checked_add(count);
        if end.is_none_or(|e| e > view.len()) {
            return Err(Error::invalid(format!(
                "{}: {what} {peer}: elements {offset}..{offset}+{count} lie outside a buffer of {} elements",
                self.name,
                view.len()
            )));
        }
        let buf = match self
            .bufs
            .iter()
            .position(|b| b.view.raw().same_as(view.raw()))
        {
            Some(i) => i,
            None => {
                self.bufs.push(GroupBuf {
                    view: view.clone(),
                    written: false,
                });
                self.bufs.len() - 1
            }
        };
        let dtype = view.dtype();
        let b = &mut self.bufs[buf];
        if b.view.dtype() != dtype {
            return Err(Error::invalid(format!(
                "{}: one buffer used as both {} and {}",
                self.name,
                b.view.dtype(),
                dtype
            )));
        }
        b.written |= dir == Dir::Recv;
        self.ops.push(OpSpec {
            dir,
            peer,
            buf,
            offset: offset * dtype.size(),
            count,
            dtype,
            device: None,
        });
        Ok(())
    }

    /// Checks the group as a whole.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a buffer is both sent from and received
    /// into, receive regions overlap, or the sends to this rank do not pair
    /// up with its receives from itself (same count of operations, each
    /// receive at least as large as its send).
    pub(crate) fn check(&self) -> Result<()> {
        // One operation with another rank (plain send/recv): nothing to pair
        // or overlap.
        if let [o] = self.ops.as_slice()
            && o.peer != self.rank
        {
            return Ok(());
        }
        for (i, b) in self.bufs.iter().enumerate() {
            let ops = || self.ops.iter().filter(move |o| o.buf == i);
            if b.written && ops().any(|o| o.dir == Dir::Send) {
                return Err(Error::invalid(format!(
                    "{}: a buffer is both sent from and received into in one group",
                    self.name
                )));
            }
            let mut regions: Vec<(usize, usize)> = ops()
                .filter(|o| o.dir == Dir::Recv)
                .map(|o| (o.offset, o.offset + o.bytes()))
                .collect();
            regions.sort_unstable();
            if let Some(w) = regions.windows(2).find(|w| w[0].1 > w[1].0) {
                return Err(Error::invalid(format!(
                    "{}: receive regions overlap (bytes {}..{} and {}..{} of one buffer)",
                    self.name, w[0].0, w[0].1, w[1].0, w[1].1
                )));
            }
        }
        let (sends, recvs) = self.self_ops();
        if sends.len() != recvs.len() {
            return Err(Error::invalid(format!(
                "{}: {} send(s) to this rank but {} recv(s) from it; a rank exchanges with itself only within one group, one recv per send",
                self.name,
                sends.len(),
                recvs.len()
            )));
        }
        for (s, r) in sends.iter().zip(&recvs) {
            let (s, r) = (&self.ops[*s], &self.ops[*r]);
            if s.dtype != r.dtype || s.count > r.count {
                return Err(Error::invalid(format!(
                    "{}: a send to this rank of {} {} does not fit its recv of {} {}",
                    self.name, s.count, s.dtype, r.count, r.dtype
                )));
            }
        }
        Ok(())
    }

    /// Indices of the sends to and receives from this rank, in order.
    pub(crate) fn self_ops(&self) -> (Vec<usize>, Vec<usize>) {
        let pick = |dir| {
            (0..self.ops.len())
                .filter(|&i| self.ops[i].peer == self.rank && self.ops[i].dir == dir)
                .collect::<Vec<_>>()
        };
        (pick(Dir::Send), pick(Dir::Recv))
    }
}
