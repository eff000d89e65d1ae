//! docs/fairgate.schema.json is the JSON Schema the parser's own key tables
//! make (`schema::json_schema`), each key typed from the configuration
//! reference, and a real validator (Python `jsonschema`) reading it accepts
//! every shipped policy and refuses an unknown key or a value of the wrong
//! type, as `fairgate check` does. `FAIRGATE_BLESS=1` rewrites the file.

use std::path::Path;
use std::process::Command;

const PUBLISHED: &str = "docs/fairgate.schema.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_published_schema_is_the_one_the_parser_makes() {
    let reference = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let made = serde_json::to_string_pretty(&fairgate::config::schema::json_schema(&reference))
        .unwrap()
        + "\n";
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
    // YAML 1.2's core schema, as the reader and editors read it: only
    // true/false are booleans (YAML 1.1's `on`, `off`, `yes` stay strings).
    let script = r#"
import json, re, sys, yaml, jsonschema
class Loader(yaml.SafeLoader):
    pass
Loader.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|false|True|False|TRUE|FALSE)$"), list("tTfF"))
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
for path in sys.argv[2:]:
    doc = yaml.load(open(path), Loader=Loader)
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
            // Its first problem by place: a rate the schema's pattern refuses.
            "error at limits/burst/default/rate: '5/x' does not match '^[0-9]+/[0-9]*(s|m|h|d)$'",
        ]
    );
}

/// Every key of the schema has a type (or an enum, a constant, a choice of
/// types): none is `{}`, which would accept anything.
#[test]
fn every_key_of_the_schema_has_a_type() {
    use serde_json::Value;
    fn walk(path: &str, schema: &Value, untyped: &mut Vec<String>) {
        let typed = ["type", "anyOf", "enum", "const"]
            .iter()
            .any(|k| schema.get(k).is_some());
        if !typed {
            untyped.push(path.to_string());
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(&format!("{path}.{k}"), v, untyped);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(v) = schema.get(key).filter(|v| v.is_object()) {
                walk(&format!("{path}.{key}"), v, untyped);
            }
        }
        for v in schema
            .get("anyOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(&format!("{path}|"), v, untyped);
        }
    }
    let text = std::fs::read_to_string(root().join(PUBLISHED)).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    let mut untyped = Vec::new();
    walk("", &schema, &mut untyped);
    assert_eq!(untyped, Vec::<String>::new());
    let described = text.matches("\"description\"").count();
    assert!(described >= 300, "{described} descriptions");
}

/// Values of the wrong type or outside their range are refused by the
/// schema alone, before `fairgate check`.
#[test]
fn the_schema_refuses_wrong_values() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "server: {listen: [\"0.0.0.0:8080\"], max_connections: many}\n",
            "server/max_connections",
        ),
        ("store: {kind: mysql}\n", "store/kind"),
        (
            "server: {listen: [\"0.0.0.0:8080\"], header_timeout: 10 seconds}\n",
            "server/header_timeout",
        ),
        (
            "upstreams: {api: {targets: [\"a:1\"], balance: random}}\n",
            "upstreams/api/balance",
        ),
    ];
    let files: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, (yaml, _))| {
            let path = dir.path().join(format!("bad{i}.yaml"));
            std::fs::write(&path, yaml).unwrap();
            path.display().to_string()
        })
        .collect();
    let results = validate(&files.iter().map(String::as_str).collect::<Vec<_>>());
    for ((yaml, at), result) in cases.iter().zip(&results) {
        assert!(
            result.starts_with(&format!("error at {at}:")),
            "{yaml}: {result}"
        );
    }
}
