//! The stand-in's configuration: every environment variable it reads, read
//! once, at the first call that needs one.
//!
//! **Profiles.** `STREAMCOMM_STANDIN_PROFILE` picks the defaults of the other
//! settings; a variable set explicitly always wins over its profile's default.
//!
//! | setting | `default` | `h200` | `h100` |
//! |---|---|---|---|
//! | `STREAMCOMM_STANDIN_DRIVER_VERSION` | 13000 (CUDA 13.0) | 13000 | 13000 |
//! | `STREAMCOMM_STANDIN_MEMORY_POOLS` | 0 | 1 | 1 |
//! | `STREAMCOMM_STANDIN_GDR` | 0 | 1 | 1 |
//! | `STREAMCOMM_STANDIN_GDR_FLUSH` | 0 | 1 (only with `GDR`) | 1 (only with `GDR`) |
//! | `STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS` | 0 | 50 | 50 |
//! | `STREAMCOMM_STANDIN_COMPUTE_MODE` | 0 (DEFAULT) | 0 (DEFAULT) | 0 (DEFAULT) |
//! | `STREAMCOMM_STANDIN_STRICT` | 0 | 0 | 0 |
//! | `STREAMCOMM_STANDIN_REFUSE` | empty | empty | empty |
//! | `STREAMCOMM_STANDIN_COUNTS` | 0 | 0 | 0 |
//! | `STREAMCOMM_STANDIN_MACHINE_ID` | empty | empty | empty |
//! | `CUDA_DEVICE_MAX_CONNECTIONS` | 8 | 8 | 8 |
//! | `STREAMCOMM_STANDIN_DEVICES` | 1 | 1 | 1 |
//! | `STREAMCOMM_STANDIN_POISON` | 1 | 1 | 1 |
//!
//! `h200` and `h100` model the GPU machines the GPU check runs on: NVIDIA
//! driver 580 with CUDA 13.0, memory pools, GPUDirect RDMA, delayed
//! destructors. They differ only in the device: under `h100` it reports an
//! H100 SXM (`cuDeviceGetName` adds `, as NVIDIA H100 80GB HBM3` after the
//! stand-in's own name, which every profile keeps so that no run on the
//! stand-in passes for a GPU run; `cuDeviceTotalMem` 81,559 MiB; a 5120-bit
//! memory bus); under `default` and `h200` it keeps the stand-in's name alone
//! and reports the host's memory. Compute capability 9.0 and 132 SMs in every
//! profile.
//!
//! `STREAMCOMM_STANDIN_REFUSE` (a comma-separated list, in no profile)
//! refuses what a sandboxed or restricted machine may refuse, so that
//! callers' fallbacks get tested: `ipc` makes `cuIpcGetMemHandle` and
//! `cuIpcOpenMemHandle_v2` return `CUDA_ERROR_NOT_SUPPORTED`, and
//! `host-register` does so for `cuMemHostRegister_v2` (pinned allocations
//! with `cuMemHostAlloc` keep working, and `HOST_REGISTER_SUPPORTED` still
//! reads 1, as on machines where registration fails anyway), and
//! `batch-memops` for `cuStreamBatchMemOp_v2` (a driver without batched
//! stream memory operations), and `vmm` for virtual memory management with
//! POSIX file descriptors (both device attributes read 0 and `cuMemCreate`
//! refuses), and `memops` for every stream memory operation (callers take
//! their spin kernels); each refused
//! entry point says once on stderr that the variable refused it.
//!
//! A value the stand-in cannot read (an unknown profile, `MEMORY_POOLS=yes`,
//! a compute mode it does not model) is not silently replaced by a default:
//! `cuInit` names it on stderr and fails with `CUDA_ERROR_INVALID_VALUE`.
//! An unknown word in `STREAMCOMM_STANDIN_REFUSE` fails the same way.
//! (`CUDA_DEVICE_MAX_CONNECTIONS`, `STREAMCOMM_STANDIN_DEVICES`,
//! `STREAMCOMM_STANDIN_DRIVER_VERSION` and `STREAMCOMM_STANDIN_POISON` keep
//! their older, forgiving reading: out-of-range numbers are clamped and
//! unreadable ones give the default.)

use std::sync::OnceLock;
use std::time::Duration;

/// A named set of defaults (`STREAMCOMM_STANDIN_PROFILE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// `default`: the stand-in's original model (CUDA 13.0, no memory pools,
    /// no GPUDirect RDMA, user-object destructors run at once).
    Default,
    /// `h200`: what an H200 on driver 580 (CUDA 13.0) reports: memory pools,
    /// GPUDirect RDMA, destructors delayed.
    H200,
    /// `h100`: as `h200`, with the device reporting an H100 SXM (80GB HBM3)
    /// in its name, total memory and memory bus width.
    H100,
}

impl Profile {
    /// The name the variable spells.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::H200 => "h200",
            Profile::H100 => "h100",
        }
    }
}

/// `CU_COMPUTEMODE_DEFAULT`.
pub const COMPUTE_DEFAULT: i32 = 0;
/// `CU_COMPUTEMODE_PROHIBITED`.
pub const COMPUTE_PROHIBITED: i32 = 2;
/// `CU_COMPUTEMODE_EXCLUSIVE_PROCESS`.
pub const COMPUTE_EXCLUSIVE_PROCESS: i32 = 3;

/// What `STREAMCOMM_STANDIN_REFUSE` refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refuse {
    /// `ipc`: `cuIpcGetMemHandle` and `cuIpcOpenMemHandle_v2`.
    pub ipc: bool,
    /// `host-register`: `cuMemHostRegister_v2`.
    pub host_register: bool,
    /// `batch-memops`: `cuStreamBatchMemOp_v2` (a driver without batched
    /// stream memory operations).
    pub batch_memops: bool,
    /// `vmm`: virtual memory management with POSIX file descriptors (the
    /// device reports both attributes 0, and `cuMemCreate` refuses).
    pub vmm: bool,
    /// `memops`: every stream memory operation (`cuStreamWaitValue*`,
    /// `cuStreamWriteValue*`, `cuStreamBatchMemOp_v2`), as on a driver or
    /// device without them: callers take their spin kernels.
    pub memops: bool,
}

/// Settings read from the environment at first use.
#[derive(Debug)]
pub struct Config {
    /// `STREAMCOMM_STANDIN_PROFILE` (`default`, `h200` or `h100`; default
    /// `default`).
    pub profile: Profile,
    /// Settings that could not be read, one sentence each; `cuInit` says
    /// them and fails with `CUDA_ERROR_INVALID_VALUE` while any exist.
    pub problems: Vec<String>,
    /// `CUDA_DEVICE_MAX_CONNECTIONS` (1..=32, default 8): hardware queues per
    /// context; streams are assigned to them round-robin and share them.
    pub max_connections: usize,
    /// `STREAMCOMM_STANDIN_DEVICES` (default 1): number of devices.
    pub devices: usize,
    /// `STREAMCOMM_STANDIN_DRIVER_VERSION` (default 13000 in every profile,
    /// what driver 580 reports for CUDA 13.0): the `cuDriverGetVersion`
    /// value, which also bounds the PTX ISA and CUBIN toolkit a module load
    /// accepts.
    pub driver_version: i32,
    /// `STREAMCOMM_STANDIN_POISON` (default on, `0` turns it off): fill new
    /// device and pinned allocations with 0xA5 bytes, since the driver does
    /// not zero them.
    pub poison: bool,
    /// `STREAMCOMM_STANDIN_COMPUTE_MODE` (0 DEFAULT, 2 PROHIBITED,
    /// 3 EXCLUSIVE_PROCESS; default 0 in every profile): the
    /// `COMPUTE_MODE` attribute. Under 3, a process's first context on a
    /// device fails with `CUDA_ERROR_DEVICE_UNAVAILABLE` (46) while another
    /// live process of the same user holds one; under 2, every context
    /// creation fails with 46.
    pub compute_mode: i32,
    /// `STREAMCOMM_STANDIN_MACHINE_ID` (default empty): names the simulated
    /// machine whose devices EXCLUSIVE_PROCESS guards, so that unrelated
    /// runs of one user (two test suites at once) do not contend; processes
    /// that should contend must share the value.
    pub machine_id: String,
    /// `STREAMCOMM_STANDIN_MEMORY_POOLS` (`0`/`1`; default 0, `h200` and
    /// `h100` 1): `MEMORY_POOLS_SUPPORTED` and the stream-ordered allocator
    /// (`cuMemAllocAsync`, `cuMemFreeAsync`, the device's default pool).
    pub memory_pools: bool,
    /// `STREAMCOMM_STANDIN_GDR` (`0`/`1`; default 0, `h200` and `h100`
    /// 1): `GPU_DIRECT_RDMA_SUPPORTED` = 1, `GPU_DIRECT_RDMA_WRITES_ORDERING` =
    /// OWNER (100), and `cuMemAlloc` memory reports
    /// `IS_GPU_DIRECT_RDMA_CAPABLE` = 1.
    pub gdr: bool,
    /// `STREAMCOMM_STANDIN_GDR_FLUSH` (`0`/`1`; default: as `GDR`):
    /// `GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` = HOST (1), so
    /// `cuFlushGPUDirectRDMAWrites` succeeds; `0` reports 0 options and the
    /// flush returns `CUDA_ERROR_NOT_SUPPORTED`. `1` without `GDR` is refused
    /// (`cuInit` fails).
    pub gdr_flush: bool,
    /// `STREAMCOMM_STANDIN_STRICT` (`0`/`1`; default 0): a driver call from a
    /// host function or a user-object destructor aborts the process (after
    /// naming the call on stderr) instead of returning
    /// `CUDA_ERROR_NOT_PERMITTED`.
    pub strict: bool,
    /// `STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS` (default 0, `h200` and `h100`
    /// 50): a user object's destructor runs on a destructor thread this long
    /// after its last reference goes, as the driver runs them asynchronously.
    pub destructor_delay: Duration,
    /// `STREAMCOMM_STANDIN_REFUSE` (comma-separated `ipc`, `host-register`,
    /// `batch-memops`, `vmm`, `memops`;
    /// default empty, in every profile): entry points that return
    /// `CUDA_ERROR_NOT_SUPPORTED`, saying once that this variable refused them.
    pub refuse: Refuse,
    /// `STREAMCOMM_STANDIN_COUNTS` (`0`/`1`; default 0): print this
    /// process's counts (driver calls, bytes read through imported IPC
    /// mappings) on stderr at exit.
    pub counts: bool,
}

/// The configuration, read at first call.
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| read(&|name| std::env::var(name).ok()))
}

/// Reads the configuration through `var` (the environment, or a test's map).
fn read(var: &dyn Fn(&str) -> Option<String>) -> Config {
    let mut problems = Vec::new();
    let num = |name: &str| var(name).and_then(|v| v.trim().parse::<i64>().ok());
    let profile = match var("STREAMCOMM_STANDIN_PROFILE").as_deref().map(str::trim) {
        None | Some("default") => Profile::Default,
        Some("h200") => Profile::H200,
        Some("h100") => Profile::H100,
        Some(other) => {
            problems.push(format!(
                "STREAMCOMM_STANDIN_PROFILE={other:?} is not a profile; expected default, h200 or h100"
            ));
            Profile::Default
        }
    };
    // The profiles of a GPU machine (driver 580 / CUDA 13.0, pools, GDR).
    let gpu = profile != Profile::Default;
    let mut strict_num =
        |name: &str, default: i64, ok: &dyn Fn(i64) -> bool, what: &str| match var(name) {
            None => default,
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) if ok(n) => n,
                _ => {
                    problems.push(format!("{name}={v:?} is not {what}"));
                    default
                }
            },
        };
    let flag = |n: i64| n == 0 || n == 1;
    let memory_pools = strict_num(
        "STREAMCOMM_STANDIN_MEMORY_POOLS",
        gpu.into(),
        &flag,
        "0 or 1",
    ) == 1;
    let gdr = strict_num("STREAMCOMM_STANDIN_GDR", gpu.into(), &flag, "0 or 1") == 1;
    let gdr_flush = strict_num("STREAMCOMM_STANDIN_GDR_FLUSH", gdr.into(), &flag, "0 or 1") == 1;
    let strict = strict_num("STREAMCOMM_STANDIN_STRICT", 0, &flag, "0 or 1") == 1;
    let counts = strict_num("STREAMCOMM_STANDIN_COUNTS", 0, &flag, "0 or 1") == 1;
    let compute_mode = strict_num(
        "STREAMCOMM_STANDIN_COMPUTE_MODE",
        COMPUTE_DEFAULT.into(),
        &|n| {
            [
                COMPUTE_DEFAULT,
                COMPUTE_PROHIBITED,
                COMPUTE_EXCLUSIVE_PROCESS,
            ]
            .contains(&(n as i32))
        },
        "a compute mode the stand-in models (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS)",
    ) as i32;
    let delay_ms = strict_num(
        "STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS",
        if gpu { 50 } else { 0 },
        &|n| (0..=60_000).contains(&n),
        "a delay in milliseconds (0..=60000)",
    );
    if gdr_flush && !gdr {
        problems.push(
            "STREAMCOMM_STANDIN_GDR_FLUSH=1 needs GPUDirect RDMA (STREAMCOMM_STANDIN_GDR=1 or the h200 or h100 profile)"
                .into(),
        );
    }
    let mut refuse = Refuse::default();
    if let Some(v) = var("STREAMCOMM_STANDIN_REFUSE") {
        for word in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "ipc" => refuse.ipc = true,
                "host-register" => refuse.host_register = true,
                "batch-memops" => refuse.batch_memops = true,
                "vmm" => refuse.vmm = true,
                "memops" => refuse.memops = true,
                other => problems.push(format!(
                    "STREAMCOMM_STANDIN_REFUSE={v:?} names {other:?}, which the stand-in cannot refuse; expected a comma-separated list of ipc, host-register, batch-memops, vmm and memops"
                )),
            }
        }
    }
    Config {
        profile,
        max_connections: num("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or(8).clamp(1, 32) as usize,
        devices: num("STREAMCOMM_STANDIN_DEVICES").unwrap_or(1).clamp(0, 16) as usize,
        driver_version: num("STREAMCOMM_STANDIN_DRIVER_VERSION")
            .unwrap_or(13000)
            .clamp(0, i32::MAX as i64) as i32,
        poison: var("STREAMCOMM_STANDIN_POISON").is_none_or(|v| v != "0"),
        compute_mode,
        machine_id: var("STREAMCOMM_STANDIN_MACHINE_ID")
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect(),
        memory_pools,
        gdr,
        gdr_flush: gdr && gdr_flush,
        strict,
        destructor_delay: Duration::from_millis(delay_ms as u64),
        refuse,
        counts,
        problems,
    }
}
