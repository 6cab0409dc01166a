//! The operations of [`CudaComm`], as cudarc users call them: the
//! collectives are written from the one table of collectives (the host
//! stream face is written from it too), each one line into one of two
//! doors (separate buffers, one buffer); then the barrier.
//!
//! Each validates its arguments, enqueues on `stream` and returns at once;
//! the semantics of each collective are those of [`crate::Communicator`]'s
//! method of the same name, and [`crate::cuda`] says how they run.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use super::CudaComm;
use crate::comm::table::{for_each_collective, method_doc};
use crate::device::{DeviceBuffers, DeviceCall, DeviceRange};
use crate::host::Element;
use crate::plan::Collective;
use crate::{ReduceOp, Result};

/// Writes the CUDA face's methods from an entry of the table.
macro_rules! cuda_face {
    (@separate [$(#[$doc:meta])*] $name:ident ($($arg:ident: $ty:ty),*),
        $collective:expr, $op:expr, $errors:literal, $_host:literal, $example:literal) => {
        $(#[$doc])*
        #[doc = cuda_face!(@docs $example, $errors)]
        pub fn $name<T: Element>(
            &self,
            send: &impl DevicePtr<T>,
            recv: &mut impl DevicePtrMut<T>,
            $($arg: $ty,)*
            stream: &Arc<CudaStream>,
        ) -> Result<()> {
            self.separate($collective, $op, send, recv, stream)
        }
    };
    (@in_place $of:ident $name:ident ($($arg:ident: $ty:ty),*), $collective:expr, $op:expr,
        $errors:literal, $summary:literal, $_host:literal, $example:literal) => {
        #[doc = concat!("[`CudaComm::", stringify!($of), "`] ", $summary, ".")]
        #[doc = cuda_face!(@docs $example, $errors)]
        pub fn $name<T: Element>(
            &self,
            buf: &mut impl DevicePtrMut<T>,
            $($arg: $ty,)*
            stream: &Arc<CudaStream>,
        ) -> Result<()> {
            self.in_place($collective, $op, buf, stream)
        }
    };
    (@docs $example:literal, $errors:literal) => {
        method_doc!(
            cuda,
            errors: "[`Error::InvalidArgument`](crate::Error::InvalidArgument) when a buffer \
                is too small for the call, `send` and `recv` are one buffer, or `stream` is \
                of another context than [`CudaComm::context`]; the stored error if the \
                communicator has failed; [`Error::Cuda`](crate::Error::Cuda) when a driver \
                call fails.",
            $example, $errors
        )
    };
}

impl CudaComm {
    for_each_collective!(cuda_face);

    fn separate<T: Element>(
        &self,
        collective: Collective,
        op: ReduceOp,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let capturing = self.check_capturable(stream, collective)?;
        let (send_len, recv_len) = (send.len(), recv.len());
        // cudarc's tracking: wait for earlier writers now, record this
        // call's read and write when the guards drop, after the enqueue.
        let (send_addr, _read) = send.device_ptr(stream);
        let (recv_addr, _write) = recv.device_ptr_mut(stream);
        self.enqueue(
            stream,
            DeviceCall {
                collective,
                dtype: T::DTYPE,
                op,
                buffers: DeviceBuffers::Separate {
                    send: DeviceRange {
                        addr: send_addr,
                        len: send_len,
                    },
                    recv: DeviceRange {
                        addr: recv_addr,
                        len: recv_len,
                    },
                },
            },
            capturing,
        )
    }

    fn in_place<T: Element>(
        &self,
        collective: Collective,
        op: ReduceOp,
        buf: &mut impl DevicePtrMut<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let capturing = self.check_capturable(stream, collective)?;
        let len = buf.len();
        let (addr, _write) = buf.device_ptr_mut(stream);
        self.enqueue(
            stream,
            DeviceCall {
                collective,
                dtype: T::DTYPE,
                op,
                buffers: DeviceBuffers::InPlace(DeviceRange { addr, len }),
            },
            capturing,
        )
    }

    /// A barrier on `stream`: later work of the stream runs only once every
    /// rank's stream has reached its barrier. Capturable; each replay is a
    /// new barrier.
    ///
    /// # Examples
    /// ```no_run
    /// # use streamcomm::ReduceOp;
    /// # let comm = streamcomm::Communicator::from_env()?;
    /// # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;
    /// let stream = cuda.context().new_stream().expect("stream");
    /// cuda.barrier(&stream)?;
    /// stream.synchronize().expect("sync"); // every rank's stream reached its barrier
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// The stored error if the communicator has failed; a stream of another
    /// context; [`Error::Cuda`](crate::Error::Cuda) when a driver call fails.
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.enqueue(stream, DeviceCall::barrier(), None)
    }
}
