//! Test harness: glibc reads `LD_LIBRARY_PATH` only at process start, so each
//! test re-runs its own binary as a child whose library path finds the
//! stand-in (`libcuda.so` and `libcuda.so.1` linked to the built cdylib), runs
//! its body there, and checks that the child printed the token it prints only
//! after the whole body ran. Children are killed after a deadline, so a hang
//! fails the test instead of stalling it.

#![allow(dead_code)]

use std::ffi::c_void;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUresult};

/// The file the stand-in's cdylib is built as.
pub(crate) const STANDIN_FILE: &str = "libstreamcomm_cuda_standin.so";

/// Environment variable naming the test a child process runs.
pub(crate) const CHILD_ENV: &str = "SC_STANDIN_CHILD";

/// What a finished (or killed) child left behind.
pub(crate) struct Child {
    pub ok: bool,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

/// True in the child process that runs test `name`'s body.
pub(crate) fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

/// The built stand-in, found from this test binary's path
/// (`target/<profile>/deps/<test>-<hash>`): `deps/libstreamcomm_cuda_standin.so`
/// (what `cargo test` builds) or the one `cargo build` uplifts to
/// `target/<profile>/`, whichever is newer.
pub(crate) fn standin_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let newest = [
        deps.to_path_buf(),
        deps.parent().unwrap_or(deps).to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(STANDIN_FILE))
    .filter_map(|lib| Some((lib.metadata().ok()?.modified().ok()?, lib)))
    .max();
    match newest {
        Some((_, lib)) => lib,
        None => panic!(
            "the stand-in {STANDIN_FILE} was not built next to {}",
            exe.display()
        ),
    }
}

/// A directory holding `libcuda.so` and `libcuda.so.1` links to the stand-in
/// (`standin-ld/` beside it).
pub(crate) fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_lib_dir).clone()
}

fn make_lib_dir() -> PathBuf {
    let lib = standin_lib();
    // Beside the build output (no temp litter); links are replaced atomically
    // because several test processes may do this at once.
    let dir = lib.parent().expect("lib dir").join("standin-ld");
    std::fs::create_dir_all(&dir).expect("standin-ld dir");
    for name in ["libcuda.so", "libcuda.so.1"] {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(lib.as_path()) {
            let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&lib, &tmp).expect("symlink");
            std::fs::rename(&tmp, &link).expect("rename symlink");
        }
    }
    dir
}

/// This test binary, to be run as test `name`'s child (its body only, on one
/// thread, its output not captured) with `env` set.
pub(crate) fn child_command(name: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .envs(env.iter().copied());
    cmd
}

/// Runs test `name` in a child with the stand-in on its library path and
/// `env` set, killing it after `deadline`.
pub(crate) fn run_child(name: &str, env: &[(&str, &str)], deadline: Duration) -> Child {
    run_child_in(name, env, deadline, &lib_dir())
}

/// As [`run_child`], with the library directory given.
pub(crate) fn run_child_in(
    name: &str,
    env: &[(&str, &str)],
    deadline: Duration,
    dir: &Path,
) -> Child {
    let mut child = child_command(name, env)
        .env("LD_LIBRARY_PATH", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let (ok, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break (status.success(), false);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (false, true);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Child {
        ok,
        timed_out,
        stdout: reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// The token a child prints when its body ran to the end.
pub(crate) fn token(name: &str) -> String {
    format!("STANDIN-CHILD-OK {name}")
}

impl Child {
    /// Panics unless the child exited successfully after printing its token.
    pub(crate) fn assert_ok(&self, name: &str) {
        assert!(
            self.ok && !self.timed_out && self.stdout.contains(&token(name)),
            "child {name} failed (timed out: {}):\n--- stdout\n{}\n--- stderr\n{}",
            self.timed_out,
            self.stdout,
            self.stderr
        );
    }
}

/// Defines a test whose body runs in a child process on the stand-in, after
/// a check that the stand-in answers (`raw`: without it). The test process
/// either runs the child with `env` and a deadline of `deadline_s` seconds
/// and requires that it succeed, or, given a closure, runs the body of that
/// closure instead (`|name| { ... }`, given the test's name), to run and
/// judge its children itself.
#[macro_export]
macro_rules! standin_test {
    ($(#[$m:meta])* $name:ident, $body:block, |$n:ident| $parent:block) => {
        $crate::standin_test!(@ $(#[$m])* $name, true, $body, $n, $parent);
    };
    ($(#[$m:meta])* raw $name:ident, $body:block, |$n:ident| $parent:block) => {
        $crate::standin_test!(@ $(#[$m])* $name, false, $body, $n, $parent);
    };
    ($(#[$m:meta])* $name:ident, $deadline_s:expr, $env:expr, $body:block) => {
        $crate::standin_test!($(#[$m])* $name, $body, |name| {
            common::run_child(name, $env, std::time::Duration::from_secs($deadline_s))
                .assert_ok(name);
        });
    };
    ($(#[$m:meta])* raw $name:ident, $deadline_s:expr, $env:expr, $body:block) => {
        $crate::standin_test!($(#[$m])* raw $name, $body, |name| {
            common::run_child(name, $env, std::time::Duration::from_secs($deadline_s))
                .assert_ok(name);
        });
    };
    (@ $(#[$m:meta])* $name:ident, $check:expr, $body:block, $n:ident, $parent:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            let $n = stringify!($name);
            if common::is_child($n) {
                if $check {
                    common::check_standin();
                }
                $body
                println!("{}", common::token($n));
                return;
            }
            $parent
        }
    };
}

/// The code of a driver result.
pub(crate) fn code(r: CUresult) -> u32 {
    r as u32
}

/// Panics with the call and code unless `r` is success.
#[track_caller]
pub(crate) fn ok(r: CUresult) {
    assert_eq!(r, sys::cudaError_enum::CUDA_SUCCESS, "driver call failed");
}

/// Panics unless `r` has code `want`.
#[track_caller]
pub(crate) fn expect(r: CUresult, want: u32) {
    assert_eq!(code(r), want, "expected CUresult {want}, got {r:?}");
}

/// Checks, in a child, that the stand-in (not another libcuda) answered, and
/// makes device 0's primary context current.
pub(crate) fn check_standin() {
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(sys::cuInit(0));
        let mut name = [0i8; 128];
        ok(sys::cuDeviceGetName(name.as_mut_ptr(), 128, 0));
        let name = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        assert!(
            name.contains("streamcomm CPU stand-in"),
            "another driver answered: {name}"
        );
    }
}

/// Retains device 0's primary context and makes it current.
pub(crate) fn bind() -> sys::CUcontext {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer; device 0 exists on the stand-in.
    unsafe {
        ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(sys::cuCtxSetCurrent(ctx));
    }
    ctx
}

/// A NON_BLOCKING (`non_blocking`) or blocking stream.
pub(crate) fn stream(non_blocking: bool) -> sys::CUstream {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer; a context is current.
    ok(unsafe { sys::cuStreamCreate(&mut s, u32::from(non_blocking)) });
    s
}

/// `len` bytes of device memory.
pub(crate) fn alloc(len: usize) -> sys::CUdeviceptr {
    let mut p = 0;
    // SAFETY: valid out-pointer; a context is current.
    ok(unsafe { sys::cuMemAlloc_v2(&mut p, len) });
    p
}

/// `len` bytes of pinned, device-mapped host memory: (host, device) pointers.
pub(crate) fn mapped(len: usize) -> (*mut u8, sys::CUdeviceptr) {
    let mut h = std::ptr::null_mut();
    let mut d = 0;
    // SAFETY: valid out-pointers; a context is current.
    unsafe {
        ok(sys::cuMemHostAlloc(&mut h, len, 0x3));
        ok(sys::cuMemHostGetDevicePointer_v2(&mut d, h, 0));
    }
    (h.cast(), d)
}

/// Reads `n` bytes of device memory (synchronous copy).
pub(crate) fn read(src: sys::CUdeviceptr, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    // SAFETY: `v` holds n bytes; `src` is device memory of at least n bytes.
    ok(unsafe { sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), src, n) });
    v
}

/// Gives graph `g` a user object whose destructor is `destroy` (called with
/// NULL; `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`): its one reference moves to
/// the graph.
pub(crate) fn give_graph_user_object(g: sys::CUgraph, destroy: unsafe extern "C" fn(*mut c_void)) {
    let mut obj = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and graph; the destructor takes any pointer.
    unsafe {
        ok(sys::cuUserObjectCreate(
            &mut obj,
            std::ptr::null_mut(),
            Some(destroy),
            1,
            1,
        ));
        ok(sys::cuGraphRetainUserObject(g, obj, 1, 1));
    }
}

/// Polls `cond` every millisecond for at most `limit`.
pub(crate) fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Says the test was skipped, and why (`streamcomm_testkit::skip`).
pub(crate) fn skip(test: &str, reason: &str) {
    streamcomm_testkit::skip(test, reason);
}
