//! GPU micro-benchmarks of the CUDA layer: reduce-copy kernel bandwidth against
//! a device-to-device copy measured in the same run, and the host → device →
//! host doorbell round trip on both signal paths. Prints a table; writes JSON to
//! `$OUT/gpu_bench.json` when `OUT` is set. Without a GPU it says so and exits 0.
//!
//! `cargo run --release -p streamcomm-gpu --example gpu_bench [BYTES]`
//!
//! `BYTES` (default 256 MiB) sizes each buffer; the first line names the
//! device and so the driver that answered (the CPU stand-in says so).
//!
//! Bytes are counted as `cuda_bench` (of `streamcomm-examples`) counts its
//! device-to-device yardstick and nccl-tests its algbw: "GB/s" is the
//! buffer's size over the time of one call, each byte once, so a copy of
//! 256 MiB in 1 ms is 268 GB/s here and there. "mem GB/s" is the memory
//! traffic: bytes read plus bytes written (2 buffers for a copy, 3 for a
//! reduction of 2 sources) over the same time.

use std::time::{Duration, Instant};

use streamcomm_gpu::{
    DeviceBuffer, Doorbells, Event, GpuConfig, Kernels, ReduceCopy, Result, Signals, Stream,
    WaitCondition,
};
use streamcomm_kernels::{DataType, ReduceOp};

/// Bytes per buffer unless the first argument says otherwise.
const DEFAULT_BYTES: usize = 256 << 20;
const ITERS: usize = 20;
const PINGS: usize = 2000;

fn main() {
    let device = match streamcomm_gpu::Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: no GPU ({e})");
            // scripts/gpu-check.sh sets this: there, no GPU is a failure.
            let required = std::env::var("STREAMCOMM_REQUIRE_GPU").is_ok_and(|v| v == "1");
            std::process::exit(if required { 1 } else { 0 });
        }
    };
    let bytes = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => DEFAULT_BYTES,
        Some(Ok(n)) if n >= 4096 && n % 4096 == 0 => n,
        Some(_) => {
            eprintln!("usage: gpu_bench [BYTES, a multiple of 4096]");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&device, bytes) {
        eprintln!("gpu_bench failed: {e}");
        std::process::exit(1);
    }
}

/// Mean seconds per call of `f` on `stream`, timed with events after one warm-up.
fn time(
    device: &streamcomm_gpu::Device,
    stream: &Stream,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    f()?;
    let (start, end) = (Event::new(device, true)?, Event::new(device, true)?);
    start.record(stream)?;
    for _ in 0..ITERS {
        f()?;
    }
    end.record(stream)?;
    stream.synchronize_timeout(Duration::from_secs(60))?;
    Ok(Event::elapsed_ms(&start, &end)? as f64 / 1e3 / ITERS as f64)
}

/// A sum reduce-copy of `srcs` into `dst` (buffers of `run`, which outlive it).
fn reduce(
    k: &Kernels,
    stream: &Stream,
    dtype: DataType,
    srcs: &[u64],
    dst: u64,
    count: usize,
) -> Result<()> {
    let work = ReduceCopy {
        srcs,
        dsts: &[dst],
        count,
        avg_divisor: 1,
    };
    // SAFETY: every pointer is a live buffer of `run` holding `count`
    // elements, kept until after the last synchronisation.
    unsafe { k.reduce_copy(stream, dtype, ReduceOp::Sum, &work) }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn run(device: &streamcomm_gpu::Device, bytes: usize) -> Result<()> {
    println!("device: {device:?}");
    println!("driver: {}", device.name());
    let kernels = Kernels::load(device, &GpuConfig::from_env())?;
    let stream = Stream::new(device)?;
    let mut bufs = Vec::new();
    for i in 0..3 {
        let mut b = DeviceBuffer::alloc(device, bytes)?;
        b.fill(i as u8 + 1)?;
        bufs.push(b);
    }
    let (a, b, c) = (bufs[0].as_raw(), bufs[1].as_raw(), bufs[2].as_raw());
    let count = bytes / 4;
    let copy_s = time(device, &stream, || {
        // SAFETY: both buffers live until the end of `run`, past every
        // synchronisation.
        unsafe { stream.copy_async(c, a, bytes) }
    })?;
    let f32 = DataType::F32;
    let kcopy_s = time(device, &stream, || {
        reduce(&kernels, &stream, f32, &[a], c, count)
    })?;
    let reduce_s = time(device, &stream, || {
        reduce(&kernels, &stream, f32, &[a, b], c, count)
    })?;
    let bf16 = DataType::Bf16;
    let bf16_s = time(device, &stream, || {
        reduce(&kernels, &stream, bf16, &[a, b], c, bytes / 2)
    })?;
    // As cuda_bench counts: the buffer's bytes over the time, each byte once.
    let gbs = |s: f64| bytes as f64 / s / 1e9;
    let copy_gbs = gbs(copy_s);
    let rows = [
        ("d2d copy (cuMemcpyDtoDAsync)", 2, copy_s),
        ("copy kernel f32, 1 src -> 1 dst", 2, kcopy_s),
        ("reduce f32 sum, 2 srcs -> 1 dst", 3, reduce_s),
        ("reduce bf16 sum, 2 srcs -> 1 dst", 3, bf16_s),
    ];
    let mut json_rows = Vec::new();
    println!(
        "\nGB/s = bytes per buffer / time, each byte once (as cuda_bench and nccl-tests' algbw);"
    );
    println!("mem GB/s = bytes read + written / time");
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>8}",
        format!("{} MiB per buffer", bytes >> 20),
        "time ms",
        "GB/s",
        "mem GB/s",
        "vs copy"
    );
    for (name, buffers, s) in rows {
        let g = gbs(s);
        let mem = buffers as f64 * g;
        println!(
            "{name:<36} {:>10.3} {g:>10.1} {mem:>10.1} {:>7.0}%",
            s * 1e3,
            100.0 * g / copy_gbs
        );
        json_rows.push(format!(
            "{{\"name\":\"{name}\",\"ms\":{:.4},\"gbs\":{g:.2},\"mem_gbs\":{mem:.2},\"vs_copy\":{:.4}}}",
            s * 1e3,
            g / copy_gbs
        ));
    }

    let mut lat_rows = Vec::new();
    println!(
        "\n{:<36} {:>10} {:>10} {:>10}",
        "doorbell round trip (host->dev->host)", "p50 us", "p99 us", "p99.9 us"
    );
    for force_spin in [false, true] {
        let signals = Signals::new(device, Some(&kernels), force_spin, Duration::from_secs(10))?;
        let bells = Doorbells::new(device, 2)?;
        let mut samples = Vec::with_capacity(PINGS);
        for k in 1..=PINGS as u32 {
            // SAFETY: the doorbells outlive the synchronisation after the loop.
            unsafe {
                signals.wait_value32(&stream, bells.device_ptr(0)?, k, WaitCondition::Geq)?;
                signals.write_value32(&stream, bells.device_ptr(1)?, k)?;
            }
            std::thread::sleep(Duration::from_micros(50)); // the wait is in place
            let t = Instant::now();
            bells.store(0, k)?;
            while bells.load(1)? != k {
                if t.elapsed() > Duration::from_secs(10) {
                    return Err(streamcomm_gpu::Error::Timeout(format!("doorbell ack {k}")));
                }
                std::hint::spin_loop();
            }
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        stream.synchronize_timeout(Duration::from_secs(10))?;
        samples.sort_by(f64::total_cmp);
        let name = format!("{:?}", signals.path());
        let (p50, p99, p999) = (
            percentile(&samples, 0.5),
            percentile(&samples, 0.99),
            percentile(&samples, 0.999),
        );
        println!("{name:<36} {p50:>10.2} {p99:>10.2} {p999:>10.2}");
        lat_rows.push(format!(
            "{{\"path\":\"{name}\",\"p50_us\":{p50:.3},\"p99_us\":{p99:.3},\"p999_us\":{p999:.3}}}"
        ));
    }
    if let Some(out) = std::env::var_os("OUT") {
        let json = format!(
            "{{\"device\":\"{}\",\"bandwidth\":[{}],\"doorbell\":[{}]}}\n",
            device.name(),
            json_rows.join(","),
            lat_rows.join(",")
        );
        let path = std::path::Path::new(&out).join("gpu_bench.json");
        std::fs::write(&path, json)
            .map_err(|e| streamcomm_gpu::Error::Io(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}
