//! JWT decoding up to and through the signature check
//! (`auth::Verifier::verify_fresh`, with the keys `config/example.yaml`
//! names, loaded as `serve` loads them): a token is accepted only when its
//! HS256 signature verifies and its claims meet the policy, and the
//! identity it gives holds the claims as written.
//!
//! Input: one mode byte, then either a raw token (mode 0) or a header and
//! claims JSON on two lines, signed with the policy's secret (mode 1; mode
//! 2 signs the claims under a plain HS256 header).

#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use fairgate::auth::{unix_now, Verifier};
use futures_util::FutureExt;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const SECRET: &str = "fuzzing-only-secret-of-32-bytes!";

static VERIFIER: LazyLock<std::sync::Arc<Verifier>> = LazyLock::new(|| {
    // Set once, before the policy that names them is loaded.
    std::env::set_var("FAIRGATE_JWT_SECRET", SECRET);
    std::env::set_var("REDIS_PASSWORD", "fuzzing-only-redis-password");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/example.yaml");
    let checked = match fairgate::build::load(&path) {
        Ok(checked) => checked,
        Err(problems) => panic!("{:?}", problems.render_errors()),
    };
    checked.material.verifier.expect("example.yaml has auth")
});

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let token = match mode % 3 {
        0 => rest.to_string(),
        1 => {
            let (header, claims) = rest.split_once('\n').unwrap_or((rest, ""));
            signed(header, claims)
        }
        _ => signed(r#"{"alg":"HS256","typ":"JWT"}"#, rest),
    };
    let verifier = &*VERIFIER;
    let result = verifier
        .verify_fresh(Some(&token))
        .now_or_never()
        .expect("without remote keys nothing waits");
    let Ok(identity) = result else {
        return;
    };
    // Accepted: the signature is the secret's, over exactly these parts.
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let message = format!("{}.{}", parts[0], parts[1]);
    let key = DecodingKey::from_secret(SECRET.as_bytes());
    let verified =
        jsonwebtoken::crypto::verify(parts[2], message.as_bytes(), &key, Algorithm::HS256);
    assert!(
        verified.unwrap_or(false),
        "accepted without the secret's signature: {token}"
    );
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "HS256", "{token}");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    claims_hold(&claims, &identity, &token);
});

fn signed(header: &str, claims: &str) -> String {
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap();
    format!("{message}.{signature}")
}

/// The claims of an accepted token meet `example.yaml`'s `auth`, and the
/// identity holds them as written.
fn claims_hold(claims: &Value, identity: &fairgate::auth::Identity, token: &str) {
    let exp = claims["exp"]
        .as_u64()
        .expect("an accepted token has a numeric exp");
    assert!(exp + 30 >= unix_now(), "expired: {token}");
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64) {
        assert!(nbf <= unix_now() + 30, "not yet valid: {token}");
    }
    assert_eq!(claims["iss"], "https://auth.example.com", "{token}");
    let aud = &claims["aud"];
    assert!(
        aud == "fieldwork-api"
            || aud
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "fieldwork-api")),
        "audience: {token}"
    );
    let as_text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    assert_eq!(
        as_text(&claims["tid"]).as_deref(),
        Some(identity.tenant.as_str()),
        "{token}"
    );
    assert!(fairgate::tenant::tenant_id_ok(identity.tenant.as_str()));
    assert_eq!(identity.user, as_text(&claims["sub"]), "{token}");
    assert_eq!(identity.token, as_text(&claims["jti"]), "{token}");
    for id in [&identity.user, &identity.token].into_iter().flatten() {
        assert!(
            !id.is_empty() && id.len() <= fairgate::auth::MAX_ID_BYTES,
            "{token}"
        );
    }
    let plan = &identity.plan;
    assert!(
        plan.len() <= 64 && plan.bytes().all(|b| b.is_ascii_graphic()),
        "{token}"
    );
}
