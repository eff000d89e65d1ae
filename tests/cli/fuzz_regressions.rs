//! What the fuzz targets (fuzz/, `scripts/fuzz`) found, each input
//! minimized and kept here as written, so it stays found without nightly.

use fairgate::config::{Config, EscapedSlashes};
use fairgate::import::manifests::read;
use fairgate::proxy::proxy_protocol::{parse, Header};
use fairgate::proxy::target::{normalize, path_is_safe, target, BadTarget, PathRules};

/// proxy_protocol: a v1 line of 122 bytes was taken whole when its CRLF
/// came in the same read, and refused when the first 108 bytes came alone:
/// whether a client got in depended on how its proxy's bytes were cut.
#[test]
fn a_proxy_v1_line_over_107_bytes_is_refused_however_it_arrives() {
    let long = format!(
        "PROXY TCP4 203.0.1.7 10.0{}.0./ 515 5HTTP/1.\r\n",
        "b".repeat(78)
    );
    assert_eq!(long.len(), 122);
    assert!(parse(long.as_bytes()).is_err());
    assert!(parse(&long.as_bytes()[..108]).is_err());
    // 107 bytes with the CRLF is the longest line taken.
    let port = "0".repeat(107 - "PROXY TCP4 203.0.113.7 10.0.0.1 1 443\r\n".len());
    let longest = format!("PROXY TCP4 203.0.113.7 10.0.0.1 {port}1 443\r\n");
    assert_eq!(longest.len(), 107);
    let (header, used) = parse(longest.as_bytes()).unwrap().unwrap();
    assert_eq!(header, Header::Client("203.0.113.7:1".parse().unwrap()));
    assert_eq!(used, 107);
    assert_eq!(parse(&longest.as_bytes()[..106]), Ok(None));
}

/// target_differential: `..%3B` was no dot segment to fairgate, yet an
/// upstream that decodes before it cuts `;params` (Shiro, some Spring
/// set-ups) reads `/public/..%3B/admin` as `/admin`.
#[test]
fn an_encoded_semicolon_after_dots_is_a_dot_segment() {
    let rules = PathRules {
        escaped_slashes: EscapedSlashes::Reject,
        keep_path_parameters: true,
    };
    for raw in [
        "/public/..%3B/admin",
        "//a/%2E%3b",
        "/a/.%3bx/b",
        "/a/%2e%2E%3B/b",
    ] {
        let read = target(raw.as_bytes(), "GET", None, rules);
        assert_eq!(read, Err(BadTarget::DotSegment), "{raw}");
    }
    assert!(!path_is_safe("/a/.%3B"));
    // A semicolon that cuts no dot segment stays a path character.
    assert!(path_is_safe("/a/b%3Bc/..x"));
    let read = target(b"/files/a%3Bb", "GET", None, rules)
        .unwrap()
        .unwrap();
    assert_eq!(read.path, "/files/a%3Bb");
}

/// target_normalize: `normalize` decodes a leading `%2F` into a path that
/// starts with `/` when the raw one did not; `target` refuses such a raw
/// target (not origin-form) before it normalises, so nothing routes it.
#[test]
fn a_target_that_does_not_start_with_a_slash_is_refused_before_decoding() {
    let raw = "%2FC\u{8}ftp///x@hx";
    assert_eq!(
        normalize(raw, EscapedSlashes::Decode).unwrap(),
        "/C\u{8}ftp/x@hx"
    );
    let rules = PathRules {
        escaped_slashes: EscapedSlashes::Decode,
        keep_path_parameters: false,
    };
    assert_eq!(
        target(raw.as_bytes(), "GET", None, rules),
        Err(BadTarget::Form)
    );
}

/// policy_yaml: a problem about a section holding only a comment at the
/// end of the file is placed at the end of the input (the line after the
/// last, column 1), not at a line of some other text.
#[test]
fn a_problem_at_the_end_of_the_input_is_placed_there() {
    let text = "# A route lists the same limit twice.\nstore:\n # k ";
    let reading = Config::read_text("fuzz.yaml", text, std::path::Path::new("config"));
    assert!(!reading.problems.list.is_empty());
    for p in &reading.problems.list {
        assert!((p.line, p.column) <= (4, 1), "{p:?}");
    }
}

/// ingress_manifests: the same Ingress twice in the inputs (a file and the
/// directory holding it, or a copy pasted twice) made its limit twice, a
/// policy with a duplicate key that `check` refused. The later copy wins,
/// as it would applied to a cluster.
#[test]
fn an_ingress_given_twice_is_imported_once() {
    let ingress = format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: headers
  namespace: app
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: \"{{rps}}\"
{A_EXAMPLE_SPEC}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("twice.yaml");
    let text = format!(
        "{}---\n{}",
        ingress.replace("{rps}", "4"),
        ingress.replace("{rps}", "5")
    );
    std::fs::write(&file, text).unwrap();
    let objects = read(&[file.clone(), dir.path().to_path_buf()]).unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(
        objects[0]
            .text(&[
                "metadata",
                "annotations",
                "nginx.ingress.kubernetes.io/limit-rps"
            ])
            .as_deref(),
        Some("5")
    );
    let options = import_options(&file);
    let imported = fairgate::import::convert(&objects, &options).text();
    let reading = Config::read_text("imported.yaml", &imported, dir.path());
    let syntax: Vec<_> = reading
        .problems
        .errors()
        .filter(|p| p.code == "config.yaml_syntax")
        .collect();
    assert!(syntax.is_empty(), "{syntax:?}\n{}", imported);
}

/// ingress_manifests: a `custom-headers` ConfigMap with an empty value (or
/// none: a nested mapping in a hand-written file) made a response header
/// edit with an empty value, which the policy reader refuses, so the whole
/// imported policy did not load. The annotation is now not supported.
#[test]
fn a_custom_header_with_an_empty_value_is_not_imported() {
    let manifests = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: security-headers, namespace: app}}
data:
  X-Frame-Options: DENY
  X-Empty: \"\"
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: headers
  namespace: app
  annotations:
    nginx.ingress.kubernetes.io/custom-headers: app/security-headers
{A_EXAMPLE_SPEC}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("headers.yaml");
    std::fs::write(&file, manifests).unwrap();
    let objects = read(std::slice::from_ref(&file)).unwrap();
    let imported = fairgate::import::convert(&objects, &import_options(&file));
    let text = imported.text();
    let reading = Config::read_text("imported.yaml", &text, dir.path());
    let refused: Vec<_> = reading
        .problems
        .errors()
        .filter(|p| p.code == "config.type_invalid")
        .collect();
    assert!(refused.is_empty(), "{refused:?}\n{}", text);
    assert!(imported.unsupported() > 0);
}

/// ingress_manifests: a rule with `host: ""` made a route matching the
/// host "", which the policy reader refuses, so the whole imported policy
/// did not load. An empty host is a rule for any host, as if absent.
#[test]
fn an_empty_rule_host_is_a_rule_for_any_host() {
    let ingress = |host: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: any, namespace: app}}
spec:
  ingressClassName: nginx
  rules:
    - {host}http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: {{name: app, port: {{number: 80}}}}
"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let import = |name: &str, text: String| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let objects = read(std::slice::from_ref(&file)).unwrap();
        let imported = fairgate::import::convert(&objects, &import_options(&file)).text();
        let reading = Config::read_text("imported.yaml", &imported, dir.path());
        let errors: Vec<_> = reading.problems.errors().collect();
        assert!(errors.is_empty(), "{errors:?}\n{}", imported);
        imported
    };
    let empty = import("empty.yaml", ingress("host: \"\"\n      "));
    let absent = import("absent.yaml", ingress(""));
    assert_eq!(
        empty.replace("empty.yaml", "absent.yaml"),
        absent,
        "host \"\" and no host import differently"
    );
}

/// The spec of an Ingress with one rule, host `a.example`, path `/`.
const A_EXAMPLE_SPEC: &str = "spec:
  ingressClassName: nginx
  rules:
    - host: a.example
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: {name: app, port: {number: 80}}
";

/// `fairgate import ingress-nginx FILE` with every other option at its default.
fn import_options(file: &std::path::Path) -> fairgate::import::Options {
    #[derive(clap::Parser)]
    struct Import {
        #[command(flatten)]
        options: fairgate::import::Options,
    }
    let args = ["import", file.to_str().unwrap()];
    <Import as clap::Parser>::parse_from(args).options
}
