//! Point-to-point on CUDA streams: `send`, `recv` and groups of them.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use super::CudaComm;
use crate::Result;
use crate::comm::p2p::Dir;
use crate::device::{DeviceP2p, DeviceRange};
use crate::host::Element;

/// Sends and receives posted together with [`CudaComm::group`] (NCCL's
/// `ncclGroupStart/End`): they progress together, so any order of calls
/// works, and they run as one operation on the group's stream.
pub struct CudaGroup<'a> {
    ops: Vec<DeviceP2p>,
    // cudarc's tracking of each buffer: recorded when the group is enqueued.
    guards: Vec<SyncOnDrop<'a>>,
    stream: &'a Arc<CudaStream>,
}

impl<'a> CudaGroup<'a> {
    /// Adds a send of all of `buf` to `peer`.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (r, n) = (comm.rank(), comm.size());
    /// let out = stream.clone_htod(&[r as f32; 256]).expect("copy");
    /// let mut inb = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// // A ring shift: any order of the two calls works inside a group.
    /// cuda.group(&stream, |g| {
    ///     g.recv(&mut inb, (r + n - 1) % n)?;
    ///     g.send(&out, (r + 1) % n)
    /// })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// None here: the group is checked as a whole when `group` ends.
    pub fn send<T: Element>(&mut self, buf: &'a impl DevicePtr<T>, peer: usize) -> Result<()> {
        let len = buf.len();
        let (addr, guard) = buf.device_ptr(self.stream);
        self.push(Dir::Send, peer, T::DTYPE, DeviceRange { addr, len }, guard)
    }

    /// Adds a receive from `peer` into `buf` (a message up to its length;
    /// elements past a shorter message keep their contents).
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (r, n) = (comm.rank(), comm.size());
    /// let out = stream.clone_htod(&[r as f32; 256]).expect("copy");
    /// let mut inb = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// // A ring shift: any order of the two calls works inside a group.
    /// cuda.group(&stream, |g| {
    ///     g.recv(&mut inb, (r + n - 1) % n)?;
    ///     g.send(&out, (r + 1) % n)
    /// })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CudaGroup::send`].
    pub fn recv<T: Element>(
        &mut self,
        buf: &'a mut impl DevicePtrMut<T>,
        peer: usize,
    ) -> Result<()> {
        let len = buf.len();
        let (addr, guard) = buf.device_ptr_mut(self.stream);
        self.push(Dir::Recv, peer, T::DTYPE, DeviceRange { addr, len }, guard)
    }

    fn push(
        &mut self,
        dir: Dir,
        peer: usize,
        dtype: crate::DataType,
        range: DeviceRange,
        guard: SyncOnDrop<'a>,
    ) -> Result<()> {
        self.ops.push(DeviceP2p {
            dir,
            peer,
            dtype,
            range,
        });
        self.guards.push(guard);
        Ok(())
    }
}

impl CudaComm {
    /// Posts the sends and receives `f` adds as one operation on `stream`.
    /// Nothing is enqueued if `f` fails; an empty group enqueues nothing.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let (r, n) = (comm.rank(), comm.size());
    /// let out = stream.clone_htod(&[r as f32; 256]).expect("copy");
    /// let mut inb = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// // A ring shift: any order of the two calls works inside a group.
    /// cuda.group(&stream, |g| {
    ///     g.recv(&mut inb, (r + n - 1) % n)?;
    ///     g.send(&out, (r + 1) % n)
    /// })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// What `f` returns; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a peer out of range, a receive buffer overlapping another
    /// operation's, unpaired sends to this rank, or a stream of another
    /// context.
    pub fn group<'a, R>(
        &self,
        stream: &'a Arc<CudaStream>,
        f: impl FnOnce(&mut CudaGroup<'a>) -> Result<R>,
    ) -> Result<R> {
        self.check_capturable(stream, "group")?;
        let mut g = CudaGroup {
            ops: Vec::new(),
            guards: Vec::new(),
            stream,
        };
        let r = f(&mut g)?;
        // Asked again: `f`, the caller's code, ran since the check.
        let queue = self.queue(stream, "group", None)?;
        crate::device::enqueue_device_group(&self.comm, &queue, &self.shared, &g.ops)?;
        // `g.guards` drop here, after the enqueue: cudarc records the use.
        Ok(r)
    }

    /// Sends `buf` to `peer` on `stream`; messages to one peer arrive in
    /// posting order.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let buf = stream.clone_htod(&[1.0f32; 256]).expect("copy");
    /// if comm.rank() == 0 {
    ///     cuda.send(&buf, 1, &stream)?; // rank 1 posts the matching recv
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CudaComm::group`]; a send to this rank itself outside a group.
    pub fn send<T: Element>(
        &self,
        buf: &impl DevicePtr<T>,
        peer: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.group(stream, |g| g.send(buf, peer))
    }

    /// Receives a message from `peer` into the front of `buf` on `stream`.
    ///
    /// # Examples
    /// ```no_run
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// let mut buf = stream.alloc_zeros::<f32>(256).expect("alloc");
    /// if comm.rank() == 1 {
    ///     cuda.recv(&mut buf, 0, &stream)?; // rank 0's send lands in buf
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CudaComm::send`]; a larger message fails the operation (kept
    /// as the communicator's error).
    pub fn recv<T: Element>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        peer: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.group(stream, |g| g.recv(buf, peer))
    }
}
