//! `fairgate import ingress-nginx` on the corpus in `tests/ingress-nginx/`
//! (one directory a case, its manifests written from the shapes in
//! ingress-nginx's documentation and examples): the exact policy and
//! report, `fairgate check` on each policy, the manifests refused. The
//! gateway started on the policies is `import_served.rs`.
//!
//! After a deliberate change, `FAIRGATE_BLESS=1 cargo test --test controller import::`
//! rewrites the expected files; review their diff.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::ingress_import::*;

const CASES: &[&str] = &[
    "auth",
    "canary",
    "client-certs",
    "cors",
    "defaults",
    "grpc",
    "legacy",
    "mirror",
    "passthrough",
    "rate-limit",
    "regex-host",
    "rewrite",
    "snippets",
    "tls",
    "upstream-tls",
];

#[test]
fn every_case_gives_exactly_the_expected_policy_and_report() {
    let bless = std::env::var("FAIRGATE_BLESS").as_deref() == Ok("1");
    for case in CASES {
        let (policy, report, code) = import(case);
        let dir = format!("tests/ingress-nginx/{case}");
        if bless {
            std::fs::write(format!("{dir}/policy.expected.yaml"), &policy).unwrap();
            std::fs::write(format!("{dir}/report.expected"), &report).unwrap();
        }
        let want = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
        assert_eq!(policy, want("policy.expected.yaml"), "{case}: policy");
        assert_eq!(report, want("report.expected"), "{case}: report");
        let unsupported = report.lines().any(|l| l.contains(": not supported"));
        assert_eq!(code, if unsupported { 2 } else { 0 }, "{case}: exit code");
    }
}

#[test]
fn shadow_marks_every_imported_limit_and_replicas_come_from_the_controller() {
    let (policy, report, _) = import_with(&[
        "--shadow",
        "--replicas",
        "3",
        "tests/ingress-nginx/rate-limit",
    ]);
    assert_eq!(policy.matches("shadow: true").count(), 2, "{policy}");
    assert_eq!(policy.matches("status: 503").count(), 3, "{policy}");
    assert!(report.contains("rate 15/s, shadow;"), "{report}");
    // Without --replicas: the controller's Deployment, or its autoscaler's maximum.
    let dir = tempfile::tempdir().unwrap();
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ingress-nginx-controller, namespace: ingress-nginx}\nspec: {replicas: 2}\n";
    std::fs::write(dir.path().join("controller.yaml"), deployment).unwrap();
    let controller = dir.path().join("controller.yaml");
    let (policy, report, _) = import_with(&[
        "tests/ingress-nginx/rate-limit",
        controller.to_str().unwrap(),
    ]);
    assert!(policy.contains("capacity: 52, rate: \"10/s\""), "{policy}");
    assert!(report.contains("controller: replicas: mapped (2 pods, from Deployment ingress-nginx/ingress-nginx-controller)"), "{report}");
    let hpa = "kind: HorizontalPodAutoscaler\nmetadata: {name: c, namespace: ingress-nginx}\nspec: {scaleTargetRef: {name: ingress-nginx-controller}, minReplicas: 2, maxReplicas: 4}\n";
    std::fs::write(dir.path().join("hpa.yaml"), hpa).unwrap();
    let (policy, _, _) = import_with(&[
        "tests/ingress-nginx/rate-limit",
        dir.path().to_str().unwrap(),
    ]);
    assert!(policy.contains("capacity: 104, rate: \"20/s\""), "{policy}");
}

#[test]
fn a_server_wide_access_rule_that_does_not_parse_withholds_every_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let configmap = "kind: ConfigMap\nmetadata: {name: ingress-nginx-controller, namespace: ingress-nginx}\ndata: {whitelist-source-range: \"10.0.0.0/8, office\"}\n";
    std::fs::write(dir.path().join("configmap.yaml"), configmap).unwrap();
    let (policy, report, code) =
        import_with(&["tests/ingress-nginx/rewrite", dir.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(served_hosts(&policy).is_empty(), "{policy}");
    assert!(
        report.contains(
            "whitelist-source-range: not supported (\"office\" is not a CIDR or address)"
        ),
        "{report}"
    );
    assert_eq!(report.matches("paths: not supported (not imported: the ConfigMap's whitelist-source-range did not carry over)").count(), 4, "{report}");
}

/// The exit code and standard error of an import that is refused.
fn import_refused(inputs: &[&Path]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["import", "ingress-nginx"])
        .args(inputs)
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "no policy: {out:?}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A "billion laughs": nine copies of nine copies ... of a string, eleven
/// lines that a loader expanding aliases turns into 9^8 strings.
const LAUGHS: &str = "kind: ConfigMap\nmetadata: {name: lol, namespace: t}\ndata:\n  \
    a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n  \
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n  \
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n  \
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n  \
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n  \
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n  \
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n  \
    h: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n";

#[test]
fn finding_5_yaml_aliases_in_manifests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let laughs = dir.path().join("laughs.yaml");
    std::fs::write(&laughs, LAUGHS).unwrap();
    assert_eq!(LAUGHS.lines().count(), 11);
    let (code, stderr) = import_refused(&[&laughs]);
    assert_eq!(
        (code, stderr),
        (
            1,
            format!(
                "import: {}:4:9: a YAML anchor (&name): anchors and aliases are refused in manifests\n",
                laughs.display()
            )
        )
    );
    // An alias alone (of an anchor YAML would have had to accept first).
    let alias = dir.path().join("alias.yaml");
    std::fs::write(
        &alias,
        "kind: ConfigMap\nmetadata: {name: x}\ndata: *nothing\n",
    )
    .unwrap();
    let (code, stderr) = import_refused(&[&alias]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!("import: {}:3:", alias.display())),
        "{stderr}"
    );
}

#[test]
fn finding_5_manifest_files_are_bounded_in_size_and_nodes() {
    let dir = tempfile::tempdir().unwrap();
    // Over 16 MiB: refused before it is read (the file is sparse).
    let big = dir.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((16 << 20) + 1).unwrap();
    let (code, stderr) = import_refused(&[&big]);
    assert_eq!(
        (code, stderr),
        (
            1,
            format!(
                "import: {}: 16777217 bytes: a manifest file may have at most 16777216 (16 MiB)\n",
                big.display()
            )
        )
    );
    // A million and one nodes in 2 MB.
    let many = dir.path().join("many.yaml");
    let items = vec!["0"; 1_000_000].join(",");
    std::fs::write(&many, format!("kind: List\nitems: [{items}]\n")).unwrap();
    let (code, stderr) = import_refused(&[&many]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!("import: {}:2:", many.display()))
            && stderr.ends_with(
                ": more than 1000000 YAML nodes: a manifest file may have at most that many\n"
            ),
        "{stderr}"
    );
}

#[test]
fn finding_12_the_admin_listener_is_on_loopback_unless_told() {
    let (policy, report, _) = import("rewrite");
    assert!(
        policy.contains("\nadmin: {listen: \"127.0.0.1:9090\"}\n"),
        "{policy}"
    );
    assert!(
        report.contains(
            "controller: admin.listen: mapped (127.0.0.1:9090: /healthz, /readyz and /metrics answer \
             without authentication, on loopback only; for kubelet probes or a Prometheus scrape by pod IP \
             give --admin-listen 0.0.0.0:9090 and reach that port only from inside the cluster \
             (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the traffic Service))\n"
        ),
        "{report}"
    );
    let (policy, report, _) = import_with(&[
        "--admin-listen",
        "0.0.0.0:9090",
        "tests/ingress-nginx/rewrite",
    ]);
    assert!(
        policy.contains("\nadmin: {listen: \"0.0.0.0:9090\"}\n"),
        "{policy}"
    );
    assert!(
        report.contains(
            "controller: admin.listen: mapped (0.0.0.0:9090, from --admin-listen: /healthz, /readyz and \
             /metrics answer anyone who reaches it, without authentication; reach that port only from inside \
             the cluster (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the \
             traffic Service))\n"
        ),
        "{report}"
    );
}

/// An Ingress of one path, with `annotations` (YAML flow mapping entries).
fn ingress(name: &str, host: &str, annotations: &str) -> String {
    format!(
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: t, annotations: {{{annotations}}}}}\n\
         spec:\n  rules:\n  - host: {host}\n    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: s, port: {{number: 80}}}}}}}}]}}\n"
    )
}

#[test]
fn rules_that_do_not_carry_over_withhold_what_they_guarded() {
    let dir = tempfile::tempdir().unwrap();
    let p = "nginx.ingress.kubernetes.io";
    let manifests = [
        // A list of only separators: "every address" to fairgate.
        ingress(
            "commas",
            "a.example.com",
            &format!("{p}/whitelist-source-range: \" , \""),
        ),
        // An access rule inside a block.
        ingress(
            "blocked",
            "b.example.com",
            &format!("{p}/configuration-snippet: \"if ($remote_addr !~ 10) {{ return 403; }}\""),
        ),
        ingress("open", "c.example.com", ""),
    ]
    .concat();
    std::fs::write(dir.path().join("ingresses.yaml"), &manifests).unwrap();
    // Snippets read, as the ConfigMap may say.
    let snippets = "kind: ConfigMap\nmetadata: {name: ingress-nginx-controller, namespace: x}\n\
                    data: {allow-snippet-annotations: \"true\"}\n";
    std::fs::write(dir.path().join("configmap.yaml"), snippets).unwrap();
    let input = dir.path().to_str().unwrap();
    let (policy, report, code) = import_with(&["--replicas", "1", input]);
    assert_eq!(code, 2);
    assert!(
        report.contains("t/commas: paths: not supported (not imported:"),
        "{report}"
    );
    assert!(
        report.contains("t/blocked: paths: not supported (not imported:"),
        "{report}"
    );
    let served = served_hosts(&policy);
    assert!(
        !served.contains("a.example.com") && !served.contains("b.example.com"),
        "{policy}"
    );
    assert!(policy.contains("c.example.com"), "{policy}");
    // A rule of the controller for every Ingress that does not carry over
    // (a global-auth-url with nginx variables) withholds them all; a
    // ConfigMap named but not given is said.
    let cm = "kind: ConfigMap\nmetadata: {name: ingress-nginx-controller, namespace: x}\ndata: {global-auth-url: \"https://auth/check?host=$host\"}\n";
    std::fs::write(dir.path().join("configmap.yaml"), cm).unwrap();
    let (policy, report, _) = import_with(&["--replicas", "1", input]);
    assert!(served_hosts(&policy).is_empty(), "{policy}");
    assert!(
        report.contains("global-auth-url: not supported"),
        "{report}"
    );
    let (_, report, code) = import_with(&["--configmap", "x/other", "tests/ingress-nginx/rewrite"]);
    assert_eq!(code, 2);
    assert!(
        report.contains(
            "controller: configmap: not supported (ConfigMap x/other is not among the inputs"
        ),
        "{report}"
    );
}

#[test]
fn a_default_backend_serves_its_own_hosts_only() {
    let dir = tempfile::tempdir().unwrap();
    let with_rules = "kind: Ingress\nmetadata: {name: shop, namespace: t}\nspec:\n  defaultBackend: {service: {name: fallback, port: {number: 80}}}\n  rules:\n  - host: shop.example.com\n    http: {paths: [{path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}]}\n";
    std::fs::write(dir.path().join("a.yaml"), with_rules).unwrap();
    let (policy, _, _) = import_with(&["--replicas", "1", dir.path().to_str().unwrap()]);
    assert!(
        policy.contains("match: {host: shop.example.com}\n    upstream: t_fallback-80"),
        "{policy}"
    );
    assert!(!policy.contains("match: {}"), "no catch-all: {policy}");
    let without_rules = "kind: Ingress\nmetadata: {name: all, namespace: t}\nspec: {defaultBackend: {service: {name: fallback, port: {number: 80}}}}\n";
    std::fs::write(dir.path().join("a.yaml"), without_rules).unwrap();
    let (policy, _, _) = import_with(&["--replicas", "1", dir.path().to_str().unwrap()]);
    assert!(
        policy.contains("match: {}\n    fallback: true\n    upstream: t_fallback-80"),
        "{policy}"
    );
}

#[test]
fn finding_8_names_that_become_paths_are_validated_as_the_api_server_would() {
    let dir = tempfile::tempdir().unwrap();
    let with_tls = |ns: &str, name: &str, secret: &str, service: &str| {
        format!(
            "---\nkind: Ingress\nmetadata: {{name: \"{name}\", namespace: \"{ns}\"}}\nspec:\n  \
             tls: [{{hosts: [{name}.example.com], secretName: \"{secret}\"}}]\n  \
             rules: [{{host: {name}.example.com, http: {{paths: [{{path: /, pathType: Prefix, \
             backend: {{service: {{name: \"{service}\", port: {{number: 80}}}}}}}}]}}}}]\n"
        )
    };
    let manifests = [
        with_tls(
            "shop",
            "secret",
            "../../../../etc/ssl/private/server",
            "web",
        ),
        with_tls("../../..", "namespace", "tls", "web"),
        with_tls("shop", "service", "tls", "web/../x"),
        with_tls("shop", "fine", "fine-tls", "web"),
    ]
    .concat();
    std::fs::write(dir.path().join("ingresses.yaml"), manifests).unwrap();
    let (policy, report, code) = import_with(&["--replicas", "1", dir.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(!policy.contains(".."), "{policy}");
    assert!(
        policy.contains("cert_file: /etc/fairgate/tls/shop/fine-tls/tls.crt")
            && policy.contains("host: fine.example.com"),
        "{policy}"
    );
    for host in ["secret", "namespace", "service"] {
        assert!(!policy.contains(&format!("{host}.example.com")), "{policy}");
    }
    let lines: Vec<&str> = report.lines().filter(|l| l.contains(": paths: ")).collect();
    assert_eq!(
        lines,
        [
            "shop/secret: paths: not supported (not imported: secretName \"../../../../etc/ssl/private/server\" \
             is not a DNS-1123 subdomain (at most 253 of a-z, 0-9, - and .), as the API server requires; \
             it would become a file path, a host name or a key)",
            "\"../../../namespace\": paths: not supported (not imported: namespace \"../../..\" is not a \
             DNS-1123 label (at most 63 of a-z, 0-9 and -), as the API server requires; it would become a \
             file path, a host name or a key)",
            "shop/service: paths: not supported (not imported: Service \"web/../x\" is not a DNS-1035 label \
             (at most 63 of a-z, 0-9 and -, starting with a letter), as the API server requires; it would \
             become a file path, a host name or a key)",
        ]
    );
}

#[test]
fn every_produced_policy_passes_check() {
    for case in CASES {
        let (policy, _, _) = import(case);
        let dir = tempfile::tempdir().unwrap();
        mount_secrets(&policy, dir.path());
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, &policy).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
            .args(["check", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("ok\n"),
            "{case}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains("warning"), "{case}: {stdout}");
    }
}

#[test]
fn the_unsupported_list_is_exactly_the_annotations_without_a_mapping() {
    let mut unsupported = BTreeSet::new();
    for case in CASES {
        let (_, report, _) = import(case);
        for line in report.lines().filter(|l| l.contains(": not supported")) {
            let (subject, rest) = line.split_once(": ").unwrap();
            let item = rest.split(": not supported").next().unwrap();
            unsupported.insert(format!("{subject} {item}"));
        }
    }
    let p = "nginx.ingress.kubernetes.io";
    let want: BTreeSet<String> = [
        format!("default/widgets {p}/cors-allow-origin"),
        format!("apps/lost-secret {p}/auth-secret"),
        format!("apps/lost-secret {p}/auth-type"),
        "apps/lost-secret paths".to_string(),
        format!("app/legacy {p}/configuration-snippet"),
        format!("app/legacy {p}/server-snippet"),
        // Not an annotation: the consequence of the access rules above.
        "app/legacy paths".to_string(),
        format!("store/tomcat {p}/backend-protocol"),
        "store/tomcat paths".to_string(),
        format!("store/catalogue-public-storefront-with-a-name-longer-than-fairgate-allows {p}/load-balance"),
        format!("shop/invoices {p}/proxy-ssl-secret"),
        "shop/invoices paths".to_string(),
        format!("partners/any-cert {p}/auth-tls-verify-client"),
        "partners/any-cert paths".to_string(),
        format!("shop/borrowed-ca {p}/auth-tls-secret"),
        "shop/borrowed-ca paths".to_string(),
        format!("partners/tenants {p}/auth-tls-secret"),
        "partners/tenants paths".to_string(),
        format!("partners/anyhost {p}/auth-tls-secret"),
        "partners/anyhost paths".to_string(),
        format!("vault/api-only {p}/ssl-passthrough"),
        "vault/api-only paths".to_string(),
        format!("tenant/grab {p}/ssl-passthrough"),
        "tenant/grab paths".to_string(),
        format!("vault/mtls-pass {p}/ssl-passthrough"),
        "vault/mtls-pass paths".to_string(),
        format!("shop/search {p}/mirror-target"),
        format!("shop/reviews {p}/mirror-target"),
    ]
    .into_iter()
    .collect();
    assert_eq!(unsupported, want);
}

#[test]
fn finding_6_verified_upstream_tls_stays_verified() {
    let (policy, report, code) = import("upstream-tls");
    assert_eq!(code, 2);
    let pools = [
        "  shop_ledger-8443-https:\n    targets: [\"ledger.shop.svc.cluster.local:8443\"]\n    \
         tls: true\n    tls_verify: true\n  ",
        "  shop_payments-443-https:\n    targets: [\"payments.shop.svc.cluster.local:443\"]\n    \
         tls: true\n    tls_verify: true\n    ca_file: tls/shop/payments-ca/ca.crt\n    sni: payments.internal\n",
        "  shop_payments-443-https-2:\n    targets: [\"payments.shop.svc.cluster.local:443\"]\n    \
         tls: true\n    tls_verify: false\n",
    ];
    for pool in pools {
        assert!(policy.contains(pool), "{pool}\n{policy}");
    }
    assert!(!policy.contains("invoices-"), "{policy}");
    assert!(
        !served_hosts(&policy).contains("invoices.example.com"),
        "{policy}"
    );
    let p = "nginx.ingress.kubernetes.io";
    for line in [
        format!("shop/payments: {p}/proxy-ssl-verify: mapped (tls_verify: true, against ca_file tls/shop/payments-ca/ca.crt; \
                 the name checked is proxy-ssl-name, else the pool's sni (the Service's DNS name))"),
        format!("shop/payments: {p}/proxy-ssl-secret: approximated (ca_file tls/shop/payments-ca/ca.crt: the Secret's \
                 ca.crt must be mounted there, as the TLS certificates are; its tls.crt and tls.key, which ingress-nginx \
                 presented to the backend as a client certificate, are not: fairgate presents none, so a backend that \
                 requires one refuses the gateway)"),
        format!("shop/ledger: {p}/proxy-ssl-verify: approximated (tls_verify: true, against the system's roots: without \
                 proxy-ssl-secret ingress-nginx ignored every proxy-ssl-* annotation and verified nothing, but the \
                 annotation asks for verification; a backend certificate the system's roots do not sign gets 502 \
                 (give proxy-ssl-secret with its CA))"),
        "shop/invoices: paths: not supported (not imported: proxy-ssl-secret did not carry over; its paths served \
         without them would be open or broken)"
            .to_string(),
    ] {
        assert!(report.contains(&format!("{line}\n")), "{line}\n{report}");
    }
}

#[test]
fn finding_15_hsts_the_connect_timeout_and_buffering_carry_over() {
    // ingress-nginx's defaults, on a case that does not write them.
    let (policy, report, _) = import("tls");
    assert!(
        policy.contains("upstreams: {web_site-80: {targets: [\"site.web.svc.cluster.local:80\"], connect_timeout: \"5s\"}}\n"),
        "{policy}"
    );
    let hsts = "    response_headers: {set: {Strict-Transport-Security: \"max-age=31536000; includeSubDomains\"}}\n";
    assert_eq!(
        policy.matches(hsts).count(),
        2,
        "secure and mixed: {policy}"
    );
    for line in [
        "controller: proxy-connect-timeout: mapped (connect_timeout: 5s on every pool, ingress-nginx's default \
         (fairgate's own is 1s))",
        "controller: hsts: approximated (response_headers.set Strict-Transport-Security: \"max-age=31536000; \
         includeSubDomains\" on the routes of hosts with a TLS section, as ingress-nginx sent it (ConfigMap hsts, \
         hsts-max-age, hsts-include-subdomains, hsts-preload); on the upstream's answers, over plain HTTP too \
         (browsers ignore it there), and not on the gateway's own answers (refusals, redirects))",
    ] {
        assert!(report.contains(&format!("{line}\n")), "{line}\n{report}");
    }
    // The ConfigMap's keys change them; buffering is said, never refused.
    let (policy, report, code) = import("defaults");
    assert_eq!(code, 0, "{report}");
    assert!(policy.contains("connect_timeout: \"10s\"}}"), "{policy}");
    assert!(
        policy.contains(
            "    response_headers: {set: {Strict-Transport-Security: \"max-age=600; preload\"}}\n"
        ),
        "{policy}"
    );
    let p = "nginx.ingress.kubernetes.io";
    for line in [
        format!("files/downloads: {p}/proxy-buffering: mapped (fairgate streams responses to the client as they \
                 arrive, as off does)"),
        format!("files/downloads: {p}/proxy-request-buffering: mapped (fairgate streams request bodies upstream as \
                 they arrive, as off does)"),
        format!("files/downloads: {p}/proxy-buffer-size: mapped (nothing to size: fairgate streams bodies both ways, \
                 through no buffer of this kind and no temporary file)"),
        format!("files/downloads: {p}/proxy-max-temp-file-size: mapped (nothing to size: fairgate streams bodies both \
                 ways, through no buffer of this kind and no temporary file)"),
        "configmap ingress-nginx/ingress-nginx-controller: proxy-connect-timeout: mapped (the connect_timeout of \
         every pool)"
            .to_string(),
        "configmap ingress-nginx/ingress-nginx-controller: proxy-buffering: approximated (fairgate streams \
         responses as they arrive instead of buffering them: a slow client holds the upstream connection as long \
         as it reads)"
            .to_string(),
    ] {
        assert!(report.contains(&format!("{line}\n")), "{line}\n{report}");
    }
}

/// The policy and report of one Ingress `a` with `annotations`.
fn import_one(annotations: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let manifest = ingress("a", "a.example.com", annotations);
    std::fs::write(dir.path().join("a.yaml"), manifest).unwrap();
    let (policy, report, _) = import_with(&["--replicas", "1", dir.path().to_str().unwrap()]);
    (policy, report)
}

/// A report's lines, whatever their order (sorted by annotation name).
fn lines(report: &str) -> BTreeSet<&str> {
    report.lines().collect()
}

/// Issue 39 item 7: `allowlist-source-range` (ingress-nginx's name since
/// 1.9) is read as `whitelist-source-range` (its alias) is; given both,
/// the canonical name's value is the one read, as ingress-nginx's parser
/// reads an alias only when the canonical annotation is absent or empty.
#[test]
fn item_7_allowlist_source_range_is_an_alias() {
    let p = "nginx.ingress.kubernetes.io";
    let (alias, alias_report) = import_one(&format!(
        "{p}/whitelist-source-range: \"10.0.0.0/8, 192.168.1.7\""
    ));
    let (canonical, report) = import_one(&format!(
        "{p}/allowlist-source-range: \"10.0.0.0/8, 192.168.1.7\""
    ));
    assert!(
        alias.contains("allow_cidrs: [\"10.0.0.0/8\", \"192.168.1.7\"]"),
        "{alias}"
    );
    assert_eq!(canonical, alias);
    assert_eq!(
        lines(&report),
        lines(&alias_report.replace("/whitelist-source-range", "/allowlist-source-range")),
    );
    assert!(!report.contains(": not supported"), "{report}");
    // Both: the canonical one is read, the alias reported as not read.
    let (both, report) = import_one(&format!(
        "{p}/allowlist-source-range: \"10.0.0.0/8\", {p}/whitelist-source-range: \"0.0.0.0/0\""
    ));
    assert!(both.contains("allow_cidrs: [\"10.0.0.0/8\"]"), "{both}");
    assert!(!both.contains("0.0.0.0/0"), "{both}");
    assert!(
        report.contains(&format!(
            "t/a: {p}/whitelist-source-range: mapped (not read: {p}/allowlist-source-range is given, \
             and ingress-nginx reads its alias only when it is not)"
        )),
        "{report}"
    );
    // An empty canonical value is absent to ingress-nginx: the alias is read.
    let (empty, _) = import_one(&format!(
        "{p}/allowlist-source-range: \"\", {p}/whitelist-source-range: \"10.0.0.0/8\""
    ));
    assert!(empty.contains("allow_cidrs: [\"10.0.0.0/8\"]"), "{empty}");
    // A canonical value that does not parse withholds, as the alias's does.
    let (broken, report) = import_one(&format!(
        "{p}/allowlist-source-range: \"10.0.0.0/8, office\""
    ));
    assert!(served_hosts(&broken).is_empty(), "{broken}");
    assert!(
        report.contains("t/a: paths: not supported (not imported:"),
        "{report}"
    );
}

/// Issue 39 item 7: `limit-allowlist` is read as `limit-whitelist` is.
#[test]
fn item_7_limit_allowlist_is_an_alias() {
    let p = "nginx.ingress.kubernetes.io";
    let limits = format!("{p}/limit-rps: \"5\", {p}/limit-connections: \"2\"");
    let (alias, alias_report) =
        import_one(&format!("{limits}, {p}/limit-whitelist: \"10.0.0.0/8\""));
    let (canonical, report) = import_one(&format!("{limits}, {p}/limit-allowlist: \"10.0.0.0/8\""));
    assert!(alias.contains("exempt_cidrs: [\"10.0.0.0/8\"]"), "{alias}");
    assert_eq!(canonical, alias);
    assert_eq!(
        lines(&report),
        lines(&alias_report.replace("/limit-whitelist", "/limit-allowlist"))
    );
    assert!(
        report.contains(&format!(
            "t/a: {p}/limit-allowlist: approximated (exempt_cidrs of its own limits:"
        )),
        "{report}"
    );
    let (both, report) = import_one(&format!(
        "{limits}, {p}/limit-allowlist: \"10.0.0.0/8\", {p}/limit-whitelist: \"192.168.0.0/16\""
    ));
    assert!(both.contains("exempt_cidrs: [\"10.0.0.0/8\"]"), "{both}");
    assert!(!both.contains("192.168.0.0/16"), "{both}");
    assert!(
        report.contains(&format!(
            "t/a: {p}/limit-whitelist: mapped (not read: {p}/limit-allowlist is given, \
             and ingress-nginx reads its alias only when it is not)"
        )),
        "{report}"
    );
}

/// ingress-nginx's `tcp-services` ConfigMap (`--tcp-services-configmap`):
/// each port a listener passing bytes to its Service; a PROXY header to
/// send is not carried over (that port is left out), one to read is
/// approximated; the policy passes `check`.
#[test]
fn a_tcp_services_configmap_becomes_tcp_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: tcp-services, namespace: ingress-nginx}
data:
  "5432": "db/postgres:5432"
  "1883": "iot/mqtt:1883:PROXY"
  "6379": "cache/redis:6379::PROXY"
  "x": "db/postgres:5432"
"#;
    std::fs::write(dir.path().join("tcp.yaml"), manifest).unwrap();
    let input = dir.path().to_str().unwrap();
    let (policy, report, code) = import_with(&[
        "--replicas",
        "1",
        "--tcp-services-configmap",
        "ingress-nginx/tcp-services",
        input,
    ]);
    assert_eq!(code, 2, "{report}");
    assert!(
        policy.contains(
            "  tcp_services:\n    - {listen: \"0.0.0.0:1883\", upstream: tcp_iot_mqtt-1883}\n    \
             - {listen: \"0.0.0.0:5432\", upstream: tcp_db_postgres-5432}\n"
        ),
        "{policy}"
    );
    assert!(
        policy.contains("tcp_db_postgres-5432: {targets: [\"postgres.db.svc.cluster.local:5432\"]"),
        "{policy}"
    );
    assert!(
        !policy.contains("0.0.0.0:6379") && !policy.contains("tcp_cache"),
        "{policy}"
    );
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("tcp-services"))
        .collect();
    assert_eq!(lines.len(), 4, "{report}");
    assert!(report.contains("tcp-services ingress-nginx/tcp-services: 6379: not supported (fairgate sends no PROXY header to a TCP service)"), "{report}");
    assert!(
        report.contains("tcp-services ingress-nginx/tcp-services: 1883: approximated"),
        "{report}"
    );
    assert!(
        report.contains(
            "tcp-services ingress-nginx/tcp-services: x: not supported (\"x\" is not a port)"
        ),
        "{report}"
    );
    let (code, problems) = crate::common::check::check_in_dir(&policy, &[]);
    assert_eq!(code, Some(0), "{problems:?}\n{policy}");
}
