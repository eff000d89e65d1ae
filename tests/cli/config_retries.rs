//! `routes[].retries.retry_on` and its old name `on` through `fairgate
//! check`: what YAML 1.1 tools (Helm's toYaml, PyYAML) make of each.

use std::process::Command;

use super::config_check::check_text;

/// A policy whose one route retries a 503, with the list under `key`.
fn retrying(key: &str) -> String {
    format!(
        r#"server: {{listen: ["127.0.0.1:8080"]}}
store: {{kind: memory}}
acknowledge: [store.process_local]
upstreams: {{api: {{targets: ["127.0.0.1:3000"]}}}}
routes:
  - name: api
    match: {{path_prefix: /}}
    upstream: api
    auth: none
    retries:
      attempts: 2
      {key}: [503]
"#
    )
}

/// `yaml` loaded and dumped again by PyYAML, a YAML 1.1 library (as
/// Helm's `toYaml` and tools on go-yaml v2 would).
fn through_pyyaml(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            "import yaml,sys; print(yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(&path)
        .output()
        .expect("python3 with PyYAML is needed: scripts/deps installs it (or apt-get install -y python3-yaml)");
    assert!(
        out.status.success(),
        "python3 with PyYAML is needed: scripts/deps installs it (or pip install pyyaml): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn finding_16_retry_on_survives_a_yaml_1_1_round_trip_and_on_does_not() {
    let kept = through_pyyaml(&retrying("retry_on"));
    assert!(kept.contains("    retry_on:\n    - 503\n"), "{kept}");
    let (code, lines) = check_text(&kept);
    assert_eq!(
        (code, lines[0].as_str()),
        (Some(0), "ok"),
        "{kept}\n{lines:?}"
    );

    let turned = through_pyyaml(&retrying("on"));
    assert!(turned.contains("    true:\n    - 503\n"), "{turned}");
    let at = turned
        .lines()
        .position(|l| l.trim() == "true:")
        .expect("a true: line")
        + 1;
    let (code, lines) = check_text(&turned);
    assert_eq!(code, Some(1), "{turned}\n{lines:?}");
    assert_eq!(
        lines,
        [format!(
            "edge.yaml:{at}:5: routes.retries_invalid: routes[0].retries.true: a YAML 1.1 tool (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as true; name it retry_on:"
        )]
    );
}

#[test]
fn finding_16_check_warns_about_the_old_key_on_and_refuses_both() {
    let (code, lines) = check_text(&retrying("on"));
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        lines[..2],
        [
            "edge.yaml:12:7: routes.retries_on_deprecated: routes[0].retries.on: YAML 1.1 tools (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as true:, which fairgate refuses; name it retry_on: (warning)",
            "ok",
        ]
    );
    let (code, lines) = check_text(&retrying("retry_on").replace(
        "      retry_on: [503]\n",
        "      retry_on: [503]\n      on: [503]\n",
    ));
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(
        lines,
        ["edge.yaml:13:7: routes.retries_invalid: routes[0].retries.on: retry_on and on are the same key; keep retry_on"]
    );
}
