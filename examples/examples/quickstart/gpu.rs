//! The quick start's GPU path: the same job on CUDA streams through
//! `streamcomm::cuda::CudaComm`, when a GPU is usable.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaStream};
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

use super::{COUNT, check_sum, report, time_barriers};

/// A `CudaComm` on device `rank % devices`, or why there is none.
///
/// Every rank takes the same backend: the ranks first agree (a host
/// all-reduce of "I have a GPU", min) before the collective `CudaComm::on_device`.
pub(crate) fn open(comm: &Communicator) -> Result<CudaComm, String> {
    let devices = streamcomm_gpu::Device::count();
    let usable = matches!(devices, Ok(n) if n > 0);
    if !everyone(comm, usable).map_err(|e| e.to_string())? {
        return Err(match devices {
            Err(e) => e.to_string(),
            Ok(0) => "no CUDA device".into(),
            Ok(_) => "another rank has no usable GPU".into(),
        });
    }
    let devices = devices.map_err(|e| e.to_string())?;
    CudaComm::on_device(comm, comm.rank() % devices).map_err(|e| e.to_string())
}

/// True when `mine` holds on every rank.
fn everyone(comm: &Communicator, mine: bool) -> streamcomm::Result<bool> {
    let stream = HostStream::new()?;
    let send = HostBuffer::from_slice(&[u32::from(mine)]);
    let mut all = HostBuffer::<u32>::zeroed(1);
    comm.all_reduce(&send, &mut all, ReduceOp::Min, &stream)?;
    stream.synchronize()?;
    Ok(all.to_vec()[0] == 1)
}

pub(crate) fn run_rank(cuda: &CudaComm) -> Result<(), Box<dyn std::error::Error>> {
    let comm = cuda.communicator();
    let (rank, size) = (comm.rank(), comm.size());
    if rank == 0 {
        let path = if cuda.uses_direct_path() {
            "collectives moved and reduced on the device over CUDA IPC windows"
        } else {
            "collectives staged through pinned host memory"
        };
        println!(
            "backend: CUDA (device {} of rank 0: {}; {path})",
            cuda.device_ordinal(),
            cuda.device_name()
        );
    }
    let ctx = CudaContext::new(cuda.device_ordinal())?;
    let stream: Arc<CudaStream> = ctx.new_stream()?;
    let mut rng = rand::thread_rng();
    let input: Vec<f32> = (0..COUNT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let send = stream.clone_htod(&input)?;
    let mut everyone = stream.alloc_zeros::<f32>(COUNT * size)?;
    let mut result = stream.clone_htod(&vec![f32::NAN; COUNT])?; // poison
    cuda.all_gather(&send, &mut everyone, &stream)?;
    stream.synchronize()?;
    let t0 = Instant::now();
    cuda.all_reduce(&send, &mut result, ReduceOp::Sum, &stream)?;
    stream.synchronize()?;
    let all_reduce_time = t0.elapsed();
    if let Some(e) = cuda.async_error() {
        return Err(e.into());
    }
    let worst = check_sum(
        rank,
        size,
        &stream.clone_dtoh(&everyone)?,
        &stream.clone_dtoh(&result)?,
    )?;
    let (host_barrier, stream_barrier) =
        time_barriers(comm, || cuda.barrier(&stream), || stream.synchronize())?;
    if let Some(e) = cuda.async_error() {
        return Err(e.into());
    }
    report(
        rank,
        size,
        all_reduce_time,
        worst,
        host_barrier,
        stream_barrier,
    );
    Ok(())
}
