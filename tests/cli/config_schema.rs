//! docs/fairgate.schema.json is the JSON Schema the parser's own key tables
//! make (`schema::json_schema`), and a real validator (Python `jsonschema`)
//! reading it accepts every shipped policy and refuses an unknown key, as
//! `fairgate check` does. `FAIRGATE_BLESS=1` rewrites the file.

use std::path::Path;
use std::process::Command;

const PUBLISHED: &str = "docs/fairgate.schema.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_published_schema_is_the_one_the_parser_makes() {
    let made =
        serde_json::to_string_pretty(&fairgate::config::schema::json_schema()).unwrap() + "\n";
    if std::env::var("FAIRGATE_BLESS").as_deref() == Ok("1") {
        std::fs::write(root().join(PUBLISHED), &made).unwrap();
    }
    let published = std::fs::read_to_string(root().join(PUBLISHED)).unwrap();
    assert!(
        published == made,
        "{PUBLISHED} is stale: FAIRGATE_BLESS=1 cargo test --test cli config_schema"
    );
}

/// What Python's `jsonschema` says of each file: "ok" or its first error.
fn validate(files: &[&str]) -> Vec<String> {
    // BaseLoader keeps every scalar a string (a key `on:` stays "on", as
    // YAML 1.2 editors read it); the schema constrains keys, not types.
    let script = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
for path in sys.argv[2:]:
    doc = yaml.load(open(path), Loader=yaml.BaseLoader)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    print("ok" if not errors else "error at %s: %s" % ("/".join(map(str, errors[0].absolute_path)), errors[0].message))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(root().join(PUBLISHED))
        .args(files.iter().map(|f| root().join(f)))
        .output()
        .expect("python3 with jsonschema and PyYAML is needed: scripts/deps installs them");
    assert!(
        out.status.success(),
        "python3 jsonschema (pip install jsonschema pyyaml): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_real_validator_accepts_the_shipped_policies_and_refuses_an_unknown_key() {
    let mut good = vec!["config/example.yaml", "deploy/compose/fairgate.yaml"];
    let imported: Vec<String> = std::fs::read_dir(root().join("tests/ingress-nginx"))
        .unwrap()
        .map(|e| {
            format!(
                "tests/ingress-nginx/{}/policy.expected.yaml",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    good.extend(imported.iter().map(String::as_str));
    let results = validate(&good);
    assert_eq!(results.len(), good.len());
    for (file, result) in good.iter().zip(&results) {
        assert_eq!(result, "ok", "{file}");
    }
    let bad = validate(&[
        "config/bad/config.unknown_field.yaml",
        "config/bad/many_problems.yaml",
    ]);
    assert_eq!(
        bad,
        [
            "error at server: Additional properties are not allowed ('port' was unexpected)",
            "error at server: Additional properties are not allowed ('port' was unexpected)",
        ]
    );
}
