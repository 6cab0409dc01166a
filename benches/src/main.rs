//! streamcomm-bench (in progress).
fn main() {}
