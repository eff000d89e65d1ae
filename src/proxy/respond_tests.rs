//! The answer builder's unit tests: every `Deny`, its status and headers,
//! parsed as a client would parse it.

use super::*;
use crate::auth::failures::Throttle;

fn status(deny: Deny) -> (u16, &'static str, bool) {
    let r = deny.refusal();
    (r.status, r.slug, r.close)
}

#[test]
fn grpc_clients_get_grpc_statuses_and_encoded_messages() {
    let code = |deny: Deny| deny.refusal().grpc_status();
    assert_eq!(code(Deny::Unauthorized(AuthError::Missing)), 16);
    assert_eq!(code(Deny::NoRoute), 12);
    assert_eq!(code(Deny::BodyTooLarge { max: 1 }), 8);
    assert_eq!(
        code(Deny::NoSlot {
            policy: "u".into(),
            status: 429,
            slots: 1
        }),
        8
    );
    // ingress-nginx's 503, imported, reaches gRPC clients as UNAVAILABLE.
    assert_eq!(
        code(Deny::NoSlot {
            policy: "u".into(),
            status: 503,
            slots: 1
        }),
        14
    );
    assert_eq!(code(Deny::StoreUnavailable), 14);
    assert_eq!(code(Deny::BodyTimeout), 4);
    assert_eq!(code(Deny::BadRequest("x")), 3);
    assert_eq!(code(Deny::Internal("x")), 13);
    assert_eq!(grpc_message("a \"b\" 100% é"), "a \"b\" 100%25 %C3%A9");
}

/// One of each `Deny`, with its status, slug and whether it closes.
fn every_deny() -> Vec<(Deny, (u16, &'static str, bool))> {
    [
        (Deny::BadTarget(BadTarget::Form), (400, "bad-target", false)),
        (Deny::BadRequest("x"), (400, "bad-request", true)),
        (Deny::UriTooLong { max: 8 }, (414, "uri-too-long", false)),
        (
            Deny::HeaderTooLarge { max: 8 },
            (431, "header-too-large", false),
        ),
        (Deny::NoRoute, (404, "no-route", false)),
        (Deny::BodyTooLarge { max: 1 }, (413, "body-too-large", true)),
        (
            Deny::Unauthorized(AuthError::Expired),
            (401, "unauthorized", false),
        ),
        (
            Deny::AuthThrottled {
                wait_ms: 1500,
                by: Throttle::Address,
            },
            (429, "auth-throttled", false),
        ),
        (
            Deny::Unkeyable(Unkeyable::NotListed),
            (404, "no-route", false),
        ),
        (
            Deny::Unkeyable(Unkeyable::MissingClaim),
            (401, "unauthorized", false),
        ),
        (
            Deny::Unkeyable(Unkeyable::NoClientCert),
            (403, "client-cert-required", false),
        ),
        (
            Deny::Unkeyable(Unkeyable::ValueTooLong),
            (400, "value-too-long", false),
        ),
        (
            Deny::RateLimited {
                limit: "api".into(),
                status: 429,
                retry_after_ms: Some(1),
                reset_after_ms: 5,
                quota: Vec::new(),
            },
            (429, "rate-limited", false),
        ),
        (
            Deny::NoSlot {
                policy: "uploads".into(),
                status: 429,
                slots: 4,
            },
            (429, "no-slot", false),
        ),
        (
            Deny::NoSlot {
                policy: "conn".into(),
                status: 503,
                slots: 4,
            },
            (503, "no-slot", false),
        ),
        (Deny::StoreUnavailable, (503, "store-unavailable", false)),
        (Deny::SlotLost, (503, "slot-lost", false)),
        (Deny::BodyTimeout, (408, "body-timeout", false)),
        (Deny::Internal("x"), (500, "internal", false)),
    ]
    .into_iter()
    .chain(answer_denies())
    .chain(queue_denies())
    .collect()
}

/// A `fair_share` pool's answers.
fn queue_denies() -> Vec<(Deny, (u16, &'static str, bool))> {
    vec![
        (
            Deny::QueueFull { pool: "api".into() },
            (429, "queue-full", false),
        ),
        (
            Deny::QueueTimeout {
                pool: "api".into(),
                timeout: std::time::Duration::from_secs(2),
            },
            (503, "queue-timeout", false),
        ),
        (Deny::ClientGone, (499, "client-gone", true)),
    ]
}

/// The `Deny`s that answer for the route or the edge, not the request's content.
fn answer_denies() -> Vec<(Deny, (u16, &'static str, bool))> {
    vec![
        (Deny::AddressForbidden, (403, "address-forbidden", false)),
        (
            Deny::Redirect {
                code: 308,
                location: "https://a.example/x".into(),
            },
            (308, "redirect", false),
        ),
        (
            Deny::Preflight(vec![(
                http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
                "https://a.example".into(),
            )]),
            (204, "preflight", false),
        ),
        (
            Deny::TooManyConnections,
            (503, "too-many-connections", true),
        ),
        (
            Deny::HeadTooLarge { max: 32768 },
            (431, "header-too-large", true),
        ),
        (Deny::HeadTimeout, (408, "header-timeout", true)),
        (
            Deny::BasicUnauthorized {
                realm: "staff".into(),
            },
            (401, "unauthorized", false),
        ),
        (
            Deny::KeyUnauthorized(crate::auth::api_keys::ApiKeyError::Expired),
            (401, "unauthorized", false),
        ),
        (
            Deny::AuthRefused {
                status: 403,
                headers: vec![],
            },
            (403, "forbidden", false),
        ),
        (Deny::AuthUnavailable, (503, "auth-unavailable", false)),
        (
            Deny::ClientCert(crate::proxy::client_certs::Refused::Missing),
            (400, "client-cert-missing", false),
        ),
        (
            Deny::ClientCert(crate::proxy::client_certs::Refused::Misdirected),
            (421, "misdirected-request", false),
        ),
        (
            Deny::ClientCert(crate::proxy::client_certs::Refused::Unauthorized),
            (403, "client-cert-unauthorized", false),
        ),
        (
            Deny::Direct { status: 500 },
            (500, "direct-response", false),
        ),
    ]
}

/// A compile error when a `Deny` is added without a row above.
fn variant(deny: &Deny) -> usize {
    match deny {
        Deny::BadTarget(_) => 0,
        Deny::BadRequest(_) => 1,
        Deny::UriTooLong { .. } => 2,
        Deny::HeaderTooLarge { .. } => 3,
        Deny::NoRoute => 4,
        Deny::BodyTooLarge { .. } => 5,
        Deny::Unauthorized(_) => 6,
        Deny::AuthThrottled { .. } => 7,
        Deny::Unkeyable(_) => 8,
        Deny::RateLimited { .. } => 9,
        Deny::NoSlot { .. } => 10,
        Deny::StoreUnavailable => 11,
        Deny::SlotLost => 12,
        Deny::BodyTimeout => 13,
        Deny::AddressForbidden => 14,
        Deny::Redirect { .. } => 15,
        Deny::Preflight(_) => 16,
        Deny::Internal(_) => 17,
        Deny::TooManyConnections => 18,
        Deny::HeadTooLarge { .. } => 19,
        Deny::HeadTimeout => 20,
        Deny::BasicUnauthorized { .. } => 21,
        Deny::KeyUnauthorized(_) => 22,
        Deny::AuthRefused { .. } => 23,
        Deny::AuthUnavailable => 24,
        Deny::Direct { .. } => 25,
        Deny::ClientCert(_) => 26,
        Deny::QueueFull { .. } => 27,
        Deny::QueueTimeout { .. } => 28,
        Deny::ClientGone => 29,
    }
}

#[test]
fn every_deny_has_its_status() {
    let table = every_deny();
    let seen: std::collections::BTreeSet<usize> = table.iter().map(|(d, _)| variant(d)).collect();
    assert_eq!(seen, (0..=29).collect(), "a Deny without a row");
    for (deny, want) in table {
        assert_eq!(status(deny.clone()), want, "{deny:?}");
    }
}

/// Finding 4 of the third attack: two edge answers declared a length
/// their body did not have. Every answer, parsed as a client would.
#[test]
fn finding_4_every_answer_parses_and_its_length_is_its_body() {
    for (deny, (status, _, close)) in every_deny() {
        let wire = deny.clone().refusal().wire();
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(&wire) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!("{deny:?}: {other:?}"),
        };
        assert_eq!(resp.code, Some(status), "{deny:?}");
        let field = |name: &str| {
            resp.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| std::str::from_utf8(h.value).unwrap().to_string())
        };
        let length: usize = field("content-length").unwrap().parse().unwrap();
        assert_eq!(length, wire.len() - head, "{deny:?}: content-length");
        assert_eq!(field("connection").as_deref() == Some("close"), close);
        if length > 0 {
            let body: Value = serde_json::from_slice(&wire[head..]).unwrap();
            assert_eq!(body["status"], json!(status), "{deny:?}");
        }
    }
}

#[test]
fn refusals_carry_their_headers() {
    let header = |r: &Refusal, name: &str| {
        r.headers
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v.clone())
    };
    for by in [Throttle::Address, Throttle::User, Throttle::Queued] {
        let r = Deny::AuthThrottled { wait_ms: 1500, by }.refusal();
        assert_eq!(header(&r, "retry-after").as_deref(), Some("2"));
    }
    let r = Deny::NoSlot {
        policy: "uploads".into(),
        status: 429,
        slots: 4,
    }
    .refusal();
    assert_eq!(
        header(&r, "ratelimit-policy").as_deref(),
        Some("\"uploads\";q=4;qu=\"concurrent-requests\"")
    );
    assert_eq!(header(&r, "ratelimit").as_deref(), Some("\"uploads\";r=0"));
    let r = Deny::Unauthorized(AuthError::Missing).refusal();
    assert_eq!(header(&r, "www-authenticate").as_deref(), Some("Bearer"));
    let r = Deny::RateLimited {
        limit: "api".into(),
        status: 503,
        retry_after_ms: Some(1001),
        reset_after_ms: 9000,
        quota: Vec::new(),
    }
    .refusal();
    assert_eq!(r.status, 503);
    assert_eq!(r.title, "Service Unavailable");
    assert_eq!(header(&r, "retry-after").as_deref(), Some("2"));
    assert_eq!(r.extra["limit"], json!("api"));
}

#[test]
fn pingora_errors_by_kind_and_side() {
    let err = |t: ErrorType, side: ErrorSource| {
        let mut e = Error::new(t);
        e.esource = side;
        e
    };
    let status = |e: &Error| for_error(e, None).map(|r| r.status);
    use ErrorSource::*;
    use ErrorType::*;
    assert_eq!(status(&err(ConnectTimedout, Upstream)), Some(504));
    assert_eq!(status(&err(ConnectRefused, Upstream)), Some(502));
    assert_eq!(status(&err(ReadTimedout, Downstream)), Some(408));
    assert_eq!(status(&err(ConnectionClosed, Downstream)), None);
    assert_eq!(status(&err(InvalidHTTPHeader, Downstream)), Some(400));
    assert_eq!(status(&err(InternalError, Internal)), Some(500));
    let e = err(InternalError, Internal);
    assert_eq!(
        for_error(&e, Some(Deny::SlotLost)).map(|r| r.status),
        Some(503)
    );
}
