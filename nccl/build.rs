//! The library's soname is NCCL's, so that programs linked against it
//! record `libnccl.so.2`, as they do against NVIDIA's.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
