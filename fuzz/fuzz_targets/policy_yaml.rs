//! The located YAML policy reader (`Config::read_text`) and what `fairgate
//! check` runs on top of it (`build::from_text`, which also loads the files
//! a policy names, relative to `config/`): every problem is placed inside
//! the input, and `check` accepts exactly what reads without errors and
//! loads.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use fairgate::config::{Config, Problems};
use libfuzzer_sys::fuzz_target;

static BASE: LazyLock<PathBuf> = LazyLock::new(|| {
    // The secrets the shipped configs name, as CI sets them for `check`.
    std::env::set_var("FAIRGATE_JWT_SECRET", "fuzzing-only-secret-of-32-bytes!");
    std::env::set_var("REDIS_PASSWORD", "fuzzing-only-redis-password");
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config")
});

const FILE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let reading = Config::read_text(FILE, text, &BASE);
    located(text, &reading.problems);
    let read_ok = reading.config.is_some() && !reading.problems.has_errors();
    let check = fairgate::build::from_text(FILE, text, &BASE);
    match check {
        Ok(checked) => {
            assert!(read_ok, "check accepted what the reader refused");
            let _ = checked.config.summary();
            for line in &checked.warnings {
                assert!(line.starts_with("fuzz.yaml:"), "{line}");
            }
        }
        Err(problems) => {
            assert!(problems.has_errors(), "check refused without an error");
            located(text, &problems);
            for line in problems.render_errors() {
                assert!(line.starts_with("fuzz.yaml:"), "{line}");
            }
        }
    }
});

/// Every problem is at a line of the text and a column within that line
/// (or just past it), or at the end of the input, which the YAML parser
/// places at the start of the line after the last. Lines end as YAML ends
/// them: at CR LF, LF or a lone CR.
fn located(text: &str, problems: &Problems) {
    let lines: Vec<&str> = text
        .split("\r\n")
        .flat_map(|l| l.split(['\r', '\n']))
        .collect();
    for p in &problems.list {
        assert!(p.line >= 1 && p.column >= 1, "{p:?}");
        if (p.line, p.column) == (lines.len() + 1, 1) {
            continue;
        }
        assert!(
            p.line <= lines.len(),
            "{p:?} past the last line {}",
            lines.len()
        );
        let width = lines[p.line - 1].chars().count();
        assert!(
            p.column <= width + 1,
            "{p:?} past the end of line {:?}",
            lines[p.line - 1]
        );
    }
}
