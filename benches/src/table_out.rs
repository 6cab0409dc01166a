//! Where a subcommand's table and its `--json` figures go (`init`,
//! `bootstrap`): the table to standard output, the JSON to a file; with
//! `--json -` the JSON takes standard output and the table standard error.

use std::path::Path;

use crate::error::{Context, Fallible};

/// The destinations of one report.
pub(crate) struct TableOut<'a> {
    json: Option<&'a Path>,
}

impl<'a> TableOut<'a> {
    /// For the `--json` argument `json`.
    pub(crate) fn new(json: Option<&'a Path>) -> TableOut<'a> {
        TableOut { json }
    }

    fn json_on_stdout(&self) -> bool {
        self.json.is_some_and(|p| p.as_os_str() == "-")
    }

    /// Prints one line of the table.
    pub(crate) fn say(&self, line: String) {
        if self.json_on_stdout() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Writes `doc` where `--json` said, if it did.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub(crate) fn json(&self, doc: &serde_json::Value) -> Fallible<()> {
        let Some(path) = self.json else {
            return Ok(());
        };
        let text = serde_json::to_string_pretty(doc).context("encode the figures")?;
        if self.json_on_stdout() {
            println!("{text}");
            Ok(())
        } else {
            std::fs::write(path, text + "\n").context("write the JSON file")
        }
    }
}

/// The largest and the median of `values` (not empty).
pub(crate) fn max_median(mut values: Vec<u64>) -> (u64, u64) {
    values.sort_unstable();
    (values[values.len() - 1], values[values.len() / 2])
}
