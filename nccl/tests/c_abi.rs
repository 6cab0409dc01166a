//! libnccl.so.2 from outside, as C programs use NVIDIA's: the header
//! against the library's exports and as strict C and C++; C programs built
//! with the system `cc` against `nccl.h` and linked with `-lnccl` (their
//! `NEEDED` entry is `libnccl.so.2`), run as 2 and 3 ranks by
//! `streamcomm-run --cuda-stand-in` (the id over a socket, every call
//! checked against a host reference, bad arguments said on stderr under
//! `NCCL_DEBUG=WARN`, split, shrink, `ncclMemAlloc`, non-blocking init), one process over two devices (`ncclCommInitAll`), a rank killed in
//! the middle of all-reduces (the others get an error and abort), and a
//! program that opens the library by name with `dlopen`, which
//! `streamcomm-run --nccl` puts in its way; and the ABI against NVIDIA's own
//! `nccl.h` (enum values, struct layouts, prototypes), where
//! `scripts/nvidia-nccl-header.sh` fetched it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// `target/<profile>`, where cargo puts `libnccl.so`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("profile directory")
        .to_path_buf()
}

/// A scratch directory holding `libnccl.so` and `libnccl.so.2`, links to
/// the library this build made: what the programs link and load.
fn library_dir(name: &str) -> PathBuf {
    let built = ["deps/libnccl.so", "libnccl.so"]
        .iter()
        .map(|p| profile_dir().join(p))
        .find(|p| p.exists())
        .expect("cargo builds libnccl.so with this crate");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("streamcomm-nccl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    for link in ["libnccl.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(&built, dir.join(link)).expect("link the library");
    }
    dir
}

fn text(out: &Output) -> String {
    streamcomm_testkit::output_text(out)
}

/// Runs `cmd`, failing the test past `limit`.
fn run(cmd: Command, limit: Duration) -> Output {
    streamcomm_testkit::run_limited(cmd, limit)
}

/// A port `p` of 127.0.0.1 such that `p` and `p + 1` are free now: where
/// the C ranks' rank 0 serves its two ids.
fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
        let p = a.local_addr().unwrap().port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two free ports in a row on 127.0.0.1");
}

/// The C compiler, or why the test skips.
fn cc(test: &str) -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Some(cc),
        _ => {
            streamcomm_testkit::skip(
                test,
                &format!("no C compiler `{cc}` (`apt-get install gcc`)"),
            );
            None
        }
    }
}

/// Compiles `tests/c/<source>` against `nccl.h`, linked with `-lnccl` from
/// `lib` (with an rpath) unless `linked` is false.
fn compile(cc: &str, source: &str, lib: &Path, linked: bool) -> PathBuf {
    let src = Path::new(MANIFEST).join("tests/c").join(source);
    let exe = lib.join(source.trim_end_matches(".c"));
    let mut cmd = Command::new(cc);
    cmd.args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(MANIFEST).join("include"))
        .arg("-I")
        .arg(Path::new(MANIFEST).join("tests/c"))
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if linked {
        cmd.arg("-L")
            .arg(lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lnccl");
    }
    cmd.arg("-ldl");
    let out = run(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "compiling {source}:\n{}", text(&out));
    exe
}

/// `tests/c/<source>` compiled as [`compile`] does, into a scratch library
/// folder of its own (`dir`, see [`library_dir`]), or `None` where `test`
/// skips for want of a C compiler.
fn program(test: &str, dir: &str, source: &str, linked: bool) -> Option<PathBuf> {
    let cc = cc(test)?;
    Some(compile(&cc, source, &library_dir(dir), linked))
}

/// `streamcomm-run --cuda-stand-in -n <n> [--keep-going] -- <exe> <args>`.
fn launch(n: usize, keep_going: bool, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let options: &[&str] = if keep_going { &["--keep-going"] } else { &[] };
    launch_with(options, n, exe, args, env)
}

/// `streamcomm-run --cuda-stand-in <options> -n <n> -- <exe> <args>`.
fn launch_with(
    options: &[&str],
    n: usize,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["--cuda-stand-in", "-n", &n.to_string()])
        .args(options);
    cmd.arg("--").arg(exe).args(args);
    cmd.env_remove("STREAMCOMM_REQUIRE_GPU");
    cmd.envs(env.iter().copied());
    run(cmd, Duration::from_secs(300))
}

#[test]
fn header_declares_exactly_the_exported_symbols_and_compiles_as_c_and_cpp() {
    let lib = library_dir("symbols");
    let script = Path::new(MANIFEST).join("../scripts/check-symbols.sh");
    let header = Path::new(MANIFEST).join("include/nccl.h");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .arg(lib.join("libnccl.so.2"))
        .arg(&header)
        .arg("p?nccl");
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    streamcomm_testkit::assert_header_compiles_strictly(
        "header_declares_exactly_the_exported_symbols_and_compiles_as_c_and_cpp",
        &header,
    );
}

#[test]
fn c_ranks_on_the_stand_in_run_every_call_checked() {
    let test = "c_ranks_on_the_stand_in_run_every_call_checked";
    let Some(exe) = program(test, "ranks", "nccl_ranks.c", true) else {
        return;
    };
    let needed = streamcomm_testkit::needed_libraries(&exe).unwrap_or_else(|e| panic!("{e}"));
    assert!(needed.iter().any(|l| l == "libnccl.so.2"), "{needed:?}");
    let seed = streamcomm_testkit::seed().to_string();
    for n in [2, 3] {
        let port = free_port_pair().to_string();
        // Three ranks with NCCL_DEBUG=WARN: each refused argument is said
        // on stderr, in NCCL's style.
        let debug: &[(&str, &str)] = if n == 3 {
            &[("NCCL_DEBUG", "WARN")]
        } else {
            &[]
        };
        let out = launch(n, false, &exe, &["all", &port, &seed], debug);
        let warned = String::from_utf8_lossy(&out.stderr).contains(
            "NCCL WARN streamcomm: ncclAllReduce: invalid argument: the communicator is NULL",
        );
        assert_eq!(
            warned,
            n == 3,
            "NCCL_DEBUG=WARN only where set:\n{}",
            text(&out)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        for r in 0..n {
            assert!(
                said.contains(&format!("rank {r}: OK")),
                "{n} ranks, rank {r}:\n{}",
                text(&out)
            );
        }
        assert!(out.status.success(), "{}", text(&out));
    }
}

#[test]
fn one_process_drives_every_device_with_init_all() {
    let test = "one_process_drives_every_device_with_init_all";
    let Some(exe) = program(test, "initall", "nccl_ranks.c", true) else {
        return;
    };
    let seed = streamcomm_testkit::seed().to_string();
    let out = launch(
        1,
        false,
        &exe,
        &["initall", "0", &seed],
        &[("STREAMCOMM_STANDIN_DEVICES", "2")],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("init-all over 2 devices: OK"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_killed_rank_is_an_error_on_the_others_and_abort_returns() {
    let test = "a_killed_rank_is_an_error_on_the_others_and_abort_returns";
    let Some(exe) = program(test, "kill", "nccl_ranks.c", true) else {
        return;
    };
    let port = free_port_pair().to_string();
    const TIMEOUT_S: u64 = 10;
    let start = Instant::now();
    let out = launch(
        3,
        true,
        &exe,
        &["kill", &port, "1"],
        &[("STREAMCOMM_TIMEOUT", &TIMEOUT_S.to_string())],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    for r in [0, 2] {
        let line = said
            .lines()
            .find(|l| l.contains(&format!("rank {r}: error")))
            .unwrap_or_else(|| panic!("rank {r} saw no error:\n{}", text(&out)));
        // "[rank R] rank R: error C (...) W ms after rank 1 died: ...".
        let waited: f64 = line
            .split(") ")
            .nth(1)
            .and_then(|s| s.split(" ms").next())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("unreadable: {line}"));
        assert!(
            waited <= ((TIMEOUT_S + 2) * 1000) as f64,
            "rank {r} waited {waited} ms: {line}"
        );
        eprintln!("{line}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_program_that_dlopens_libnccl_finds_every_function() {
    let test = "a_program_that_dlopens_libnccl_finds_every_function";
    let Some(exe) = program(test, "dlopen", "nccl_dlopen.c", false) else {
        return;
    };
    let header = std::fs::read_to_string(Path::new(MANIFEST).join("include/nccl.h")).unwrap();
    let names: Vec<&str> = header
        .lines()
        .filter(|l| {
            ["ncclResult_t ", "const char *", "void "]
                .iter()
                .any(|t| l.starts_with(t) && l.contains("nccl"))
        })
        .filter_map(|l| l.split('(').next()?.split_whitespace().last())
        .map(|n| n.trim_start_matches('*'))
        .collect();
    assert!(names.len() > 100, "{} names read from nccl.h", names.len());
    let list = exe.with_file_name("names.txt");
    std::fs::write(&list, names.join("\n")).unwrap();
    // `--nccl` puts the library this build made (beside the launcher) first
    // on the program's library path, by both of its names.
    let out = launch_with(&["--nccl"], 1, &exe, &[list.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("{} symbols resolved; OK", names.len())),
        "{}",
        text(&out)
    );
}

/// NVIDIA's `nccl.h` (its folder), where `scripts/nvidia-nccl-header.sh`
/// put it in this build's target folder.
fn nvidia_include() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .map(|d| d.join("nvidia-nccl/include"))
        .find(|d| d.join("nccl.h").is_file())
}

#[test]
fn the_header_matches_nvidias_abi() {
    let test = "the_header_matches_nvidias_abi";
    let Some(cc) = cc(test) else { return };
    let Some(theirs) = nvidia_include() else {
        streamcomm_testkit::skip(
            test,
            "no NVIDIA nccl.h: `scripts/nvidia-nccl-header.sh` fetches it into target/nvidia-nccl",
        );
        return;
    };
    let dir = library_dir("abi");
    // What NVIDIA's header includes from CUDA, as little as it needs.
    let stub = dir.join("cuda-stub");
    std::fs::create_dir_all(&stub).unwrap();
    std::fs::write(
        stub.join("cuda_runtime.h"),
        "#include <stddef.h>\ntypedef struct CUstream_st *cudaStream_t;\n",
    )
    .unwrap();
    for empty in ["cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"] {
        std::fs::write(stub.join(empty), "").unwrap();
    }
    let ours = Path::new(MANIFEST).join("include");
    let probe = Path::new(MANIFEST).join("tests/c/abi_probe.c");
    let mut outputs = Vec::new();
    for (name, includes) in [
        ("ours", vec![ours.clone()]),
        ("theirs", vec![stub.clone(), theirs.clone()]),
    ] {
        let exe = dir.join(format!("abi-probe-{name}"));
        let mut cmd = Command::new(&cc);
        cmd.args(["-std=c11", "-Wall", "-Werror"]);
        for i in &includes {
            cmd.arg("-I").arg(i);
        }
        cmd.arg("-o").arg(&exe).arg(&probe);
        let out = run(cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "compiling the probe against {name}: {}",
            text(&out)
        );
        let out = run(Command::new(&exe), Duration::from_secs(30));
        assert!(out.status.success(), "{}", text(&out));
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    assert!(outputs[0].lines().count() > 60, "{}", outputs[0]);
    let differ: Vec<String> = outputs[0]
        .lines()
        .zip(outputs[1].lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("ours: {a}; NVIDIA's: {b}"))
        .collect();
    assert!(
        differ.is_empty() && outputs[0].lines().count() == outputs[1].lines().count(),
        "values and layouts that differ from NVIDIA's nccl.h:\n{}",
        differ.join("\n")
    );

    // Every prototype of ours beside NVIDIA's in one unit: C refuses a
    // function declared twice with different types.
    let header = std::fs::read_to_string(ours.join("nccl.h")).unwrap();
    let protos: String = header
        .lines()
        .filter(|l| l.starts_with("ncclResult_t ") || l.starts_with("const char *"))
        .map(|l| format!("{l}\n"))
        .collect();
    let unit = dir.join("both.c");
    std::fs::write(
        &unit,
        format!("#include <nccl.h>\n{protos}int main(void) {{ return 0; }}\n"),
    )
    .unwrap();
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(&stub)
        .arg("-I")
        .arg(&theirs)
        .arg(&unit);
    let out = run(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "our prototypes against NVIDIA's: {}",
        text(&out)
    );
}
