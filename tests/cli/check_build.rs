//! What `fairgate check` reports now that the policy builder loads every
//! file (found by attacking that change): every bad certificate in one run,
//! whatever else is wrong in its section; no password or token of a URL in
//! a problem line; no store URL accepted that the client would refuse.

use crate::common;

use common::check::check_in_dir;

const API_PEM: &str = include_str!("../../config/certs/api.pem");
const API_KEY: &str = include_str!("../../config/certs/api.key");
const LEGACY_KEY: &str = include_str!("../../config/certs/legacy.key");

const FILES: &[(&str, &str)] = &[
    ("api.pem", API_PEM),
    ("api.key", API_KEY),
    ("legacy.key", LEGACY_KEY),
    ("garbage.pem", "not a certificate\n"),
    ("empty.pem", ""),
];

const TAIL: &str = r#"store: {kind: memory}
acknowledge: [store.process_local]
upstreams: {api: {targets: ["127.0.0.1:3000"]}}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, auth: none}
"#;

fn assert_check(yaml: &str, expected: &[&str]) {
    let (code, lines) = check_in_dir(yaml, FILES);
    assert_eq!(
        (code, lines),
        (
            Some(1),
            expected.iter().map(|l| l.to_string()).collect::<Vec<_>>()
        ),
        "{yaml}"
    );
}

#[test]
fn a_tls_section_without_its_listen_still_has_its_certificates_checked() {
    let yaml = format!(
        "server:\n  listen: [\"127.0.0.1:8080\"]\n  tls:\n    certificates:\n      \
         - {{cert_file: api.pem, key_file: legacy.key}}\n    client_ca: garbage.pem\n{TAIL}"
    );
    assert_check(
        &yaml,
        &[
            "edge.yaml:3:3: config.missing_field: server.tls.listen: required",
            "edge.yaml:5:9: server.tls_invalid: server.tls.certificates[0]: legacy.key is not the key of api.pem (their public keys differ)",
            r#"edge.yaml:6:16: server.tls_invalid: server.tls.client_ca "garbage.pem": garbage.pem: holds no usable CA certificate"#,
        ],
    );
}

#[test]
fn every_bad_certificate_is_reported_in_one_run() {
    let yaml = format!(
        "server:\n  listen: [\"127.0.0.1:8080\"]\n  tls:\n    listen: \"127.0.0.1:8443\"\n    certificates:\n      \
         - {{cert_file: empty.pem, key_file: api.key}}\n      \
         - {{cert_file: garbage.pem, key_file: api.key}}\n      \
         - {{cert_file: api.pem, key_file: legacy.key}}\n{TAIL}"
    );
    assert_check(
        &yaml,
        &[
            "edge.yaml:6:9: server.tls_invalid: server.tls.certificates[0]: empty.pem: holds no certificate",
            "edge.yaml:7:9: server.tls_invalid: server.tls.certificates[1]: garbage.pem: holds no certificate",
            "edge.yaml:8:9: server.tls_invalid: server.tls.certificates[2]: legacy.key is not the key of api.pem (their public keys differ)",
        ],
    );
}

#[test]
fn a_problem_never_shows_the_password_or_query_of_a_url() {
    let yaml = r#"server: {listen: ["127.0.0.1:8080"]}
store: {kind: redis, url: "redis://:TOPSECRET@127.0.0.1:notaport/0"}
auth:
  keys: [{jwks_url: "ftp://u:PWSECRET@idp.example.com/jwks?token=QSECRET"}]
telemetry: {otlp: {endpoint: "ftp://u:OTSECRET@collector:4318"}}
upstreams: {api: {targets: ["127.0.0.1:3000"]}}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, auth: none}
"#;
    assert_check(
        yaml,
        &[
            r#"edge.yaml:2:27: store.url_invalid: store.url "redis://***@127.0.0.1:notaport/0": expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]"#,
            r#"edge.yaml:4:21: auth.key_invalid: auth.keys[0].jwks_url "ftp://***@idp.example.com/jwks?***": expected an http:// or https:// URL"#,
            r#"edge.yaml:5:30: telemetry.endpoint_invalid: telemetry.otlp.endpoint "ftp://***@collector:4318": expected an http:// or https:// URL"#,
        ],
    );
}

#[test]
fn a_store_url_the_client_would_refuse_is_refused_by_check() {
    for url in ["redis://127.0.0.1:99999/0", "redis://127.0.0.1:6379/abc"] {
        let yaml = format!(
            "server: {{listen: [\"127.0.0.1:8080\"]}}\nstore: {{kind: redis, url: \"{url}\"}}\n\
             upstreams: {{api: {{targets: [\"127.0.0.1:3000\"]}}}}\n\
             routes:\n  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: none}}\n"
        );
        let line = format!(
            "edge.yaml:2:27: store.url_invalid: store.url \"{url}\": expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]"
        );
        assert_check(&yaml, &[&line]);
    }
}

#[test]
fn a_private_key_given_as_the_public_key_is_refused_by_check() {
    // jsonwebtoken takes it, and then every valid token got 401.
    let yaml = format!(
        "server: {{listen: [\"127.0.0.1:8080\"]}}\n\
         auth:\n  keys: [{{kid: rs, alg: RS256, public_key_file: rs256.key}}]\n{TAIL}"
    );
    let key = include_str!("../fixtures/keys/rs256.key");
    let (code, lines) = check_in_dir(&yaml, &[("rs256.key", key)]);
    let line =
        "edge.yaml:3:10: auth.key_invalid: auth.keys[0]: rs256.key is not a RS256 public key \
                in PEM: a private key; give the public key";
    assert_eq!((code, lines), (Some(1), vec![line.to_string()]));
}
