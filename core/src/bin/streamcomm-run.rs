//! `streamcomm-run`: launches local ranks (filled by the launcher work).
fn main() {}
