//! Micro-benchmarks of the per-request work that is fairgate's own: route
//! matching, JWT verification and bucket key building. `cargo bench`.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use futures_util::FutureExt;

use fairgate::config::Config;
use fairgate::limit::{self, keys, Subject};
use fairgate::routing;

const SECRET_ENV: &str = "FAIRGATE_BENCH_SECRET";

fn config() -> Config {
    let mut routes = String::new();
    for i in 0..20 {
        routes.push_str(&format!(
            "  - {{name: r{i}, match: {{path_prefix: /v{i}/items, methods: [GET, POST]}}, upstream: api, limits: [api]}}\n"
        ));
    }
    let yaml = format!(
        r#"
store: {{kind: memory}}
acknowledge: [store.process_local]
auth:
  keys: [{{kid: k, alg: HS256, secret_env: {SECRET_ENV}}}]
upstreams:
  api: {{targets: ["127.0.0.1:3000"]}}
limits:
  api: {{scope: tenant, default: {{capacity: 100, rate: 50/s}}}}
  user: {{scope: tenant_user, default: {{capacity: 10, rate: 1/s}}}}
  hooks: {{scope: {{path: provider}}, default: {{capacity: 50, rate: 20/s}}}}
routes:
  - {{name: hooks, match: {{path: "/webhooks/{{provider}}/events"}}, upstream: api, limits: [api, user, hooks]}}
{routes}"#
    );
    Config::from_text("bench.yaml", &yaml, Path::new("."))
        .unwrap_or_else(|p| panic!("{p}"))
        .config
}

/// `n` routes: half `path_prefix`, half `path_regex` with a capture.
fn many_routes(n: usize) -> Config {
    let mut routes = String::new();
    for i in 0..n / 2 {
        routes.push_str(&format!(
            "  - {{name: p{i}, match: {{path_prefix: /svc{i}}}, upstream: api, auth: none, exempt: true}}\n\
             \x20 - {{name: x{i}, match: {{path_regex: \"/r{i}/items/(?<id>[0-9]+)\"}}, upstream: api, auth: none, exempt: true}}\n"
        ));
    }
    let yaml = format!(
        "store: {{kind: memory}}\nacknowledge: [store.process_local]\nupstreams:\n  api: {{targets: [\"127.0.0.1:3000\"]}}\nroutes:\n{routes}"
    );
    Config::from_text("many.yaml", &yaml, Path::new("."))
        .unwrap_or_else(|p| panic!("{p}"))
        .config
}

fn benches(c: &mut Criterion) {
    // Set before any thread reads the environment.
    std::env::set_var(SECRET_ENV, "bench-secret-0123456789abcdef");
    let config = config();
    route_matching(c, &config);
    verification_and_keys(c, &config);
    first_verifications(c);
}

/// Finding a route: the last of 21 prefix routes, a pattern with a capture,
/// and the last prefix or regex route of 10 and of 1,000.
fn route_matching(c: &mut Criterion, config: &Config) {
    let headers = http::HeaderMap::new();
    let carried = routing::Carried {
        headers: &headers,
        query: None,
        tls: false,
    };
    let table = routing::Table::new(&config.routes);
    c.bench_function("route: last of 21 prefix routes", |b| {
        b.iter(|| {
            table.find(
                black_box(config),
                "api.example.com",
                "POST",
                "/v19/items/42",
                &carried,
            )
        })
    });
    c.bench_function("route: pattern with a capture", |b| {
        b.iter(|| {
            table.find(
                black_box(config),
                "api.example.com",
                "GET",
                "/webhooks/stripe/events",
                &carried,
            )
        })
    });
    // The 1 µs budget: 1,000 routes (half regex, half prefix) against 10.
    for n in [10, 1_000] {
        let config = many_routes(n);
        let table = routing::Table::new(&config.routes);
        let last = n / 2 - 1;
        for (kind, path) in [
            ("prefix", format!("/svc{last}/items/42")),
            ("regex", format!("/r{last}/items/42")),
        ] {
            let name = format!("route: {n} routes, last {kind} route");
            c.bench_function(&name, |b| {
                b.iter(|| {
                    table.find(
                        black_box(&config),
                        "api.example.com",
                        "GET",
                        &path,
                        &carried,
                    )
                })
            });
        }
    }
}

/// A token the verified-token cache knows, then the bucket keys of a
/// request of that identity on the three-limit route.
fn verification_and_keys(c: &mut Criterion, config: &Config) {
    let auth = config.auth.as_ref().unwrap();
    let mut problems = fairgate::config::Problems::new(String::from("bench.yaml"));
    let material = fairgate::build::Material::load(config, &mut problems);
    let verifier = material.verifier.expect("the bench's auth keys load");
    let token = fairgate::auth::mint(
        auth,
        "acme",
        Some("auth0|42"),
        Some("pro"),
        std::time::Duration::from_secs(3600),
    )
    .unwrap();
    let header = format!("Bearer {token}");
    c.bench_function("jwt: verify HS256 (a token verified before)", |b| {
        b.iter(|| {
            verifier
                .verify(fairgate::auth::bearer(Some(black_box(header.as_bytes()))))
                .now_or_never()
                .expect("no JWKS fetch on this path")
                .unwrap()
        })
    });

    let identity = verifier
        .verify(fairgate::auth::bearer(Some(header.as_bytes())))
        .now_or_never()
        .unwrap()
        .unwrap();
    let hooks = &config.routes[0];
    let captures = vec![("provider".to_string(), "stripe".to_string())];
    let headers = http::HeaderMap::new();
    c.bench_function("keys: plan 3 buckets (tenant, user, path)", |b| {
        b.iter(|| {
            let subject = Subject {
                identity: Some(&identity),
                captures: &captures,
                headers: &headers,
                client_ip: None,
                client_cert: None,
            };
            limit::plan(black_box(config), hooks, &subject).unwrap()
        })
    });
    c.bench_function("keys: encode a user id", |b| {
        b.iter(|| keys::encode(black_box("auth0|5f7c8ec7c33c6c004bbafe82")))
    });
}

/// What a token the cache does not know costs: one signature check and
/// claims decoding, per algorithm, with the crypto backend fairgate uses.
fn first_verifications(c: &mut Criterion) {
    use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/keys");
    let read = |name: &str| std::fs::read(keys.join(name)).unwrap();
    let secret = b"bench-secret-0123456789abcdef";
    let cases = [
        (
            Algorithm::HS256,
            EncodingKey::from_secret(secret),
            DecodingKey::from_secret(secret),
        ),
        (
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(&read("rs256.key")).unwrap(),
            DecodingKey::from_rsa_pem(&read("rs256.pub.pem")).unwrap(),
        ),
        (
            Algorithm::ES256,
            EncodingKey::from_ec_pem(&read("es256.key")).unwrap(),
            DecodingKey::from_ec_pem(&read("es256.pub.pem")).unwrap(),
        ),
        (
            Algorithm::EdDSA,
            EncodingKey::from_ed_pem(&read("ed25519.key")).unwrap(),
            DecodingKey::from_ed_pem(&read("ed25519.pub.pem")).unwrap(),
        ),
    ];
    let claims = serde_json::json!({"tid": "acme", "sub": "user-1", "exp": 4_000_000_000u64});
    for (alg, signing, verifying) in cases {
        let token = encode(&Header::new(alg), &claims, &signing).unwrap();
        let validation = Validation::new(alg);
        c.bench_function(&format!("jwt: first verification {alg:?}"), |b| {
            b.iter(|| {
                decode::<serde_json::Value>(black_box(&token), &verifying, &validation).unwrap()
            })
        });
    }
}

criterion_group!(micro, benches);
criterion_main!(micro);
