//! The test suite's own shape (issue 39, item 8): integration tests live
//! in at most four test crates, each compiling the harness once, and no
//! suite file sits where no crate declares it (it would never run); the
//! CI script stamps each step with the time.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn item_8_integration_tests_live_in_at_most_four_crates_each_declaring_every_suite() {
    let tests = root().join("tests");
    let mut loose = Vec::new();
    let mut crates = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            loose.push(path.display().to_string());
        } else if path.join("main.rs").is_file() {
            crates.push(path);
        }
    }
    assert!(loose.is_empty(), "a test binary each: {loose:?}");
    assert!(
        (1..=4).contains(&crates.len()),
        "{} test crates: {crates:?}",
        crates.len()
    );
    for dir in crates {
        let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
        assert_eq!(
            main.matches("#[path = \"../common/mod.rs\"]").count(),
            1,
            "{}: the harness once",
            dir.display()
        );
        let declared: BTreeSet<String> = main
            .lines()
            .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
            .map(str::to_string)
            .collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.extension().is_some_and(|e| e == "rs") && stem != "main" {
                assert!(
                    declared.contains(&stem),
                    "{} is in no test crate: it never runs",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn item_8_every_ci_step_is_stamped_with_the_time() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let steps: Vec<&str> = ci.lines().filter(|l| l.starts_with("echo \"== ")).collect();
    assert!(steps.len() >= 8, "{steps:?}");
    for step in steps {
        assert!(step.contains("$(date -u +%T)"), "not stamped: {step}");
    }
}
