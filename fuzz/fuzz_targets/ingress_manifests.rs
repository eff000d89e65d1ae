//! The ingress manifest reader (`import::manifests::read`) and the import
//! that follows it (`import::convert`): a file is read or refused at a
//! place inside it, and the policy the import writes from whatever was
//! read is YAML that fairgate's own reader takes field by field (no
//! annotation value can inject a key or break out of a string).

#![no_main]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use clap::Parser;
use fairgate::config::Config;
use fairgate::import::manifests::{read, ReadError};
use fairgate::import::{convert, Options};
use libfuzzer_sys::fuzz_target;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

/// One file per process, rewritten for each input.
static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("fairgate-fuzz-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("input.yaml")
});

static OPTIONS: LazyLock<Options> =
    LazyLock::new(|| Cli::parse_from(["import", FILE.to_str().unwrap()]).options);

fuzz_target!(|data: &[u8]| {
    let mut f = std::fs::File::create(&*FILE).unwrap();
    f.write_all(data).unwrap();
    drop(f);
    let objects = match read(std::slice::from_ref(&*FILE)) {
        Ok(objects) => objects,
        Err(ReadError::Refused {
            line, column, what, ..
        }) => {
            let text = String::from_utf8_lossy(data);
            let lines = text
                .split("\r\n")
                .flat_map(|l| l.split(['\r', '\n']))
                .count();
            // The end of the input is placed at the start of the line after the last.
            let end = (line, column) == (lines + 1, 1);
            let inside = (1..=lines).contains(&line) && column >= 1;
            assert!(end || inside, "{line}:{column}: {what}");
            return;
        }
        Err(ReadError::Unreadable { .. }) => {
            assert!(
                std::str::from_utf8(data).is_err(),
                "UTF-8 text was unreadable"
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let imported = convert(&objects, &OPTIONS).text();
    let reading = Config::read_text("imported.yaml", &imported, Path::new("/nonexistent"));
    for p in reading.problems.errors() {
        assert!(
            !matches!(
                p.code,
                "config.yaml_syntax" | "config.unknown_field" | "config.type_invalid"
            ),
            "the import wrote a policy its reader cannot take: {}:{}: {}: {}\n{}",
            p.line,
            p.column,
            p.code,
            p.message,
            imported
        );
    }
});
