//! Unit tests of the substitute libraries' search and link directory.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// A file standing in for the stand-in library (no GPU code is loaded).
fn fake_library(dir: &Path) -> PathBuf {
    let lib = dir.join(CUDA_STAND_IN.file);
    std::fs::write(&lib, b"not a real library").unwrap();
    lib
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("streamcomm-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_directory_links_both_driver_names_to_the_library_and_goes_on_drop() {
    let scratch = scratch("links");
    let lib = fake_library(&scratch);
    let standin = Substitute::with_library(CUDA_STAND_IN, &lib).unwrap();
    let dir = standin.dir().to_path_buf();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "a private directory");
    for name in CUDA_STAND_IN.names {
        let target = std::fs::read_link(dir.join(name)).unwrap();
        assert_eq!(target, lib.canonicalize().unwrap(), "{name}");
    }
    assert_eq!(standin.library(), lib.canonicalize().unwrap());
    drop(standin);
    assert!(!dir.exists(), "removed on drop");
    std::fs::remove_dir_all(scratch).unwrap();
}

#[test]
fn the_directory_comes_first_on_the_library_path() {
    let scratch = scratch("path");
    let standin = Substitute::with_library(CUDA_STAND_IN, &fake_library(&scratch)).unwrap();
    let dir = standin.dir().as_os_str().to_owned();
    assert_eq!(standin.ld_library_path(None), dir);
    assert_eq!(standin.ld_library_path(Some(OsStr::new(""))), dir);
    let mut want = dir.clone();
    want.push(":/a:/b");
    assert_eq!(standin.ld_library_path(Some(OsStr::new("/a:/b"))), want);
    assert!(standin.notice().contains("not a GPU"));
    drop(standin);
    std::fs::remove_dir_all(scratch).unwrap();
}

#[test]
fn the_library_is_found_by_variable_then_beside_the_launcher() {
    let scratch = scratch("find");
    let lib = fake_library(&scratch);
    let named = lib.clone().into_os_string();
    let var = CUDA_STAND_IN.var;
    let by_var = find_library(CUDA_STAND_IN, &|v| (v == var).then(|| named.clone()), None).unwrap();
    assert_eq!(by_var, lib);
    // A variable naming nothing is an error, not a search elsewhere.
    let missing = scratch.join("missing.so").into_os_string();
    match find_library(
        CUDA_STAND_IN,
        &|v| (v == var).then(|| missing.clone()),
        None,
    ) {
        Err(Error::Unavailable(m)) => assert!(m.contains(var), "{m}"),
        other => panic!("{other:?}"),
    }
    // Beside the executable, and in its deps/.
    let exe = scratch.join("streamcomm-run");
    assert_eq!(
        find_library(CUDA_STAND_IN, &|_| None, Some(&exe)).unwrap(),
        lib
    );
    let bin = scratch.join("bin");
    std::fs::create_dir_all(bin.join("deps")).unwrap();
    let in_deps = fake_library(&bin.join("deps"));
    let exe = bin.join("streamcomm-run");
    assert_eq!(
        find_library(CUDA_STAND_IN, &|_| None, Some(&exe)).unwrap(),
        in_deps
    );
    std::fs::remove_dir_all(scratch).unwrap();
}

#[test]
fn cargo_messages_name_the_built_library() {
    let scratch = scratch("messages");
    let lib = fake_library(&scratch);
    let messages = format!(
        "{{\"reason\":\"compiler-artifact\",\"filenames\":[\"{}/libother.so\",\"{}\",\"{}/x.rlib\"]}}\n\
         {{\"reason\":\"build-finished\",\"success\":true}}\n",
        scratch.display(),
        lib.display(),
        scratch.display()
    );
    assert_eq!(built_library(CUDA_STAND_IN, messages.as_bytes()), Some(lib));
    assert_eq!(
        built_library(CUDA_STAND_IN, b"{\"reason\":\"build-finished\"}\n"),
        None
    );
    std::fs::remove_dir_all(scratch).unwrap();
}

#[test]
fn nccl_links_both_of_its_names_and_says_what_the_ranks_load() {
    let scratch = scratch("nccl");
    let lib = scratch.join(NCCL.file);
    std::fs::write(&lib, b"not a real library").unwrap();
    let nccl = Substitute::with_library(NCCL, &lib).unwrap();
    for name in ["libnccl.so", "libnccl.so.2"] {
        let target = std::fs::read_link(nccl.dir().join(name)).unwrap();
        assert_eq!(target, lib.canonicalize().unwrap(), "{name}");
    }
    let notice = nccl.notice();
    assert!(
        notice.starts_with("--nccl: ") && notice.contains("libnccl.so.2"),
        "{notice}"
    );
    let exe = scratch.join("streamcomm-run");
    assert_eq!(find_library(NCCL, &|_| None, Some(&exe)).unwrap(), lib);
    match find_library(
        NCCL,
        &|v| (v == NCCL.var).then(|| "/nowhere.so".into()),
        None,
    ) {
        Err(Error::Unavailable(m)) => assert!(m.contains("STREAMCOMM_NCCL_LIB"), "{m}"),
        other => panic!("{other:?}"),
    }
    drop(nccl);
    std::fs::remove_dir_all(scratch).unwrap();
}
