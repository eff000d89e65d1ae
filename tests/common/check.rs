//! `fairgate check` run on a policy written to a temporary directory with
//! the files it names, as an operator runs it.

use std::process::Command;

/// `check -c edge.yaml` on `yaml`, run in a temporary directory holding
/// `files`: (exit code, stdout lines).
pub fn check_in_dir(yaml: &str, files: &[(&str, &str)]) -> (Option<i32>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    std::fs::write(dir.path().join("edge.yaml"), yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["check", "-c", "edge.yaml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (out.status.code(), lines)
}
