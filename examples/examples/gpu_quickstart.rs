//! GPU quick start: the CUDA layer (`streamcomm-gpu`) on one device, without
//! a communicator. For collectives on GPUs, the CUDA backend
//! (`streamcomm::cuda::CudaComm`) is in the `cuda_bench` example and the
//! README's "On a GPU, with cudarc".
//!
//! ```text
//! cargo run --release --example gpu_quickstart
//! ```
//!
//! Opens device 0, compiles the kernels with NVRTC for its architecture (cached
//! on disk), averages two device buffers of random f32 into a third with the
//! reduce-copy kernel on a stream, checks every element against an f64
//! reference, and prints `OK`. On a machine without a usable GPU it prints why
//! and exits successfully: nothing panics, the host backend is what runs there.

use std::process::ExitCode;
use std::time::Duration;

use rand::Rng;
use streamcomm_gpu::{Device, DeviceBuffer, GpuConfig, Kernels, ReduceCopy, Stream};
use streamcomm_kernels::{DataType, ReduceOp};

const COUNT: usize = 1 << 20;

fn main() -> ExitCode {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU here, nothing to do: {e}");
            return ExitCode::SUCCESS;
        }
    };
    match run(&device) {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu_quickstart failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(device: &Device) -> Result<(), Box<dyn std::error::Error>> {
    // Which driver answered: the CPU stand-in names itself here.
    println!("driver: {} ({})", device.name(), device.arch());
    let kernels = Kernels::load(device, &GpuConfig::from_env())?;
    let stream = Stream::new(device)?;
    let mut rng = rand::thread_rng();
    let x: Vec<f32> = (0..COUNT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let y: Vec<f32> = (0..COUNT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let mut a = DeviceBuffer::alloc(device, COUNT * 4)?;
    let mut b = DeviceBuffer::alloc(device, COUNT * 4)?;
    let mut out = DeviceBuffer::alloc(device, COUNT * 4)?;
    a.copy_from_host(bytemuck::cast_slice(&x))?;
    b.copy_from_host(bytemuck::cast_slice(&y))?;
    out.fill(0xFF)?; // NaN everywhere until the kernel writes
    let work = ReduceCopy {
        srcs: &[a.as_raw(), b.as_raw()],
        dsts: &[out.as_raw()],
        count: COUNT,
        avg_divisor: 2,
    };
    // SAFETY: the three buffers hold COUNT f32 each and outlive the
    // synchronisation below.
    unsafe { kernels.reduce_copy(&stream, DataType::F32, ReduceOp::Avg, &work)? };
    stream.synchronize_timeout(Duration::from_secs(30))?;
    let mut got = vec![0f32; COUNT];
    out.copy_to_host(bytemuck::cast_slice_mut(&mut got))?;
    for i in 0..COUNT {
        let want = (x[i] as f64 + y[i] as f64) / 2.0;
        if (got[i] as f64 - want).abs() > 1e-6 {
            return Err(format!("element {i}: got {}, want {want}", got[i]).into());
        }
    }
    println!(
        "averaged {COUNT} f32 on {} ({})",
        device.name(),
        device.arch()
    );
    Ok(())
}
