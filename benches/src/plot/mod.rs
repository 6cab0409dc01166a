//! The benchmark's charts, drawn with plotters as SVG files.
//!
//! - [`sendrecv`]: `--plot file.svg` of the sendrecv sweep, latency and
//!   bandwidth against message size;
//! - [`panels`]: a grid of log-log line charts, the cost model's predicted
//!   time against size (`model --plot`).

pub(crate) mod panels;
pub(crate) mod sendrecv;
