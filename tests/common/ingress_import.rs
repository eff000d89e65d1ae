//! `fairgate import ingress-nginx` for the import suites (`import.rs`,
//! `import_served.rs`): an import of a corpus case or of given arguments,
//! and the Secrets its policy names, mounted for the test.

use super::*;

/// The policy, the report and the exit code of an import of `case`, with
/// the options every case uses.
pub fn import(case: &str) -> (String, String, i32) {
    let input = format!("tests/ingress-nginx/{case}");
    import_with(&["--replicas", "3", "--tls-dir", "tls", &input])
}

/// The policy, the report and the exit code of `fairgate import
/// ingress-nginx` with `args`; it writes nothing else.
pub fn import_with(args: &[&str]) -> (String, String, i32) {
    let dir = tempfile::tempdir().unwrap();
    let (policy, report) = (dir.path().join("policy.yaml"), dir.path().join("report"));
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["import", "ingress-nginx"])
        .arg("-o")
        .arg(&policy)
        .arg("--report")
        .arg(&report)
        .args(args)
        .output()
        .unwrap();
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    (
        std::fs::read_to_string(policy).unwrap(),
        std::fs::read_to_string(report).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

/// Writes a certificate for every `cert_file` of `policy` under `dir` (the
/// Secrets as they would be mounted), signed by one test CA, and that CA
/// for every `ca_file`.
pub fn mount_secrets(policy: &str, dir: &Path) -> Pki {
    let pki = Pki::new(dir, "import");
    for ca in policy.split("ca_file: ").skip(1) {
        let ca = ca.split([',', '}', '\n']).next().unwrap();
        std::fs::create_dir_all(dir.join(ca).parent().unwrap()).unwrap();
        std::fs::copy(pki.ca(), dir.join(ca)).unwrap();
    }
    for line in policy.lines() {
        let Some(cert) = line.trim().strip_prefix("- cert_file: ") else {
            continue;
        };
        let secret = cert.trim_end_matches("/tls.crt");
        std::fs::create_dir_all(dir.join(secret)).unwrap();
        let hosts: Vec<&str> = vec![
            "secure.example.com",
            "mixed.example.com",
            "grpctest.dev.mydomain.com",
            "files.example.com",
        ];
        let (pem, key) = pki.leaf("leaf", "imported", &hosts, "01");
        std::fs::copy(pem, dir.join(cert)).unwrap();
        std::fs::copy(key, dir.join(format!("{secret}/tls.key"))).unwrap();
    }
    pki
}

/// The hosts a policy's routes serve: every route's host but those that
/// only close the host of an Ingress not imported (`withheld_…`, 404).
pub fn served_hosts(policy: &str) -> std::collections::BTreeSet<String> {
    let doc = &yaml_rust2::YamlLoader::load_from_str(policy).unwrap()[0];
    let routes = doc["routes"].as_vec().cloned().unwrap_or_default();
    routes
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").starts_with("withheld_"))
        .filter_map(|r| r["match"]["host"].as_str().map(str::to_string))
        .collect()
}
