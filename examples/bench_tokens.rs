//! Mints the benchmark's tokens: `bench_tokens KEYS_DIR ALG COUNT OUT` writes
//! COUNT distinct tokens (one per line, each its own `jti`) signed with ALG
//! (HS256 with the secret in `FAIRGATE_JWT_SECRET`; RS256, ES256 or EdDSA
//! with the test keys in KEYS_DIR), tenant `tenant-1`, valid for a day.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, keys, alg, count, out] = args.as_slice() else {
        eprintln!("usage: bench_tokens KEYS_DIR ALG COUNT OUT");
        std::process::exit(2);
    };
    let read = |name: &str| std::fs::read(format!("{keys}/{name}")).expect("key file");
    let (alg, key) = match alg.as_str() {
        "HS256" => {
            let secret = std::env::var("FAIRGATE_JWT_SECRET").expect("FAIRGATE_JWT_SECRET");
            (
                Algorithm::HS256,
                EncodingKey::from_secret(secret.as_bytes()),
            )
        }
        "RS256" => (
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(&read("rs256.key")).unwrap(),
        ),
        "ES256" => (
            Algorithm::ES256,
            EncodingKey::from_ec_pem(&read("es256.key")).unwrap(),
        ),
        "EdDSA" => (
            Algorithm::EdDSA,
            EncodingKey::from_ed_pem(&read("ed25519.key")).unwrap(),
        ),
        other => panic!("unknown algorithm {other}"),
    };
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 86_400;
    let count: usize = count.parse().expect("COUNT");
    let mut text = String::new();
    for i in 0..count {
        let claims = serde_json::json!({
            "tid": "tenant-1", "sub": format!("user-{i}"), "jti": format!("bench-{i}"), "exp": exp,
        });
        text.push_str(&encode(&Header::new(alg), &claims, &key).expect("sign"));
        text.push('\n');
    }
    std::fs::write(out, text).expect("write tokens");
}
