//! The methods of `auth.methods` as the policy serves them: each one's
//! loaded material (htpasswd entries, API keys) or client (external), and
//! the identity map that turns what authenticated a request into tenant,
//! user and plan, so every scope works whatever authenticated it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName};

use super::api_keys::ApiKeys;
use super::basic::BasicAuth;
use super::external::ExternalAuth;
use super::{AuthError, Identity, TenantId, MAX_ID_BYTES};
use crate::config::{ApiKey, Auth, IdSource, IdentityMap, TenantOverride};

/// One method, ready to serve.
pub struct Authenticator {
    pub name: String,
    pub kind: Kind,
    pub identity: IdentityMap,
}

pub enum Kind {
    External(Box<ExternalAuth>),
    Basic {
        auth: Arc<BasicAuth>,
        /// Each user's tenant and plan, when the method has a user map.
        users: Option<super::users::UserMap>,
    },
    ApiKey {
        config: ApiKey,
        keys: ApiKeys,
    },
}

/// Every method of a policy, by name.
#[derive(Default)]
pub struct Authenticators {
    by_name: HashMap<String, Arc<Authenticator>>,
    /// Headers an external service answers with: removed from every
    /// client request, so only the gateway writes them (but for those the
    /// gateway also reads as input, see `new`).
    pub answer_headers: Vec<HeaderName>,
    /// The answer headers of methods that strip only where they serve (an
    /// Ingress's `auth-response-headers`), by the host of the routes using
    /// them (`host_key`): removed from the upstream
    /// request of every route of that host, whichever Ingress made it.
    pub answer_headers_by_host: HashMap<String, Vec<HeaderName>>,
}

impl Authenticators {
    /// Names the gateway reads from clients to authenticate (a bearer
    /// token, what an external method passes on, a cache or API-key
    /// header) are not stripped at hygiene even when a service answers
    /// with them (oauth2-proxy's `Authorization`): an external route
    /// replaces them in the upstream request instead.
    pub fn new(methods: Vec<Authenticator>) -> Self {
        let mut inputs = vec![http::header::AUTHORIZATION, http::header::COOKIE];
        let mut answer_headers = Vec::new();
        for m in &methods {
            match &m.kind {
                // Only a method that strips everywhere (the operator's)
                // may keep what it reads from being stripped: an Ingress's
                // `auth-cache-key` never turns the operator's stripping off.
                Kind::External(e) if !e.config().strip_everywhere => {}
                Kind::External(e) => {
                    answer_headers.extend(e.kept_headers().iter().cloned());
                    inputs.extend(e.config().request_headers.iter().cloned());
                    if let Some(crate::config::CacheKey::Header(h)) =
                        e.config().cache.as_ref().map(|c| &c.key)
                    {
                        inputs.push(h.clone());
                    }
                }
                Kind::ApiKey { config, .. } => inputs.extend(config.header.iter().cloned()),
                Kind::Basic { .. } => {}
            }
        }
        answer_headers.retain(|h| !inputs.contains(h));
        answer_headers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        answer_headers.dedup();
        Authenticators {
            by_name: methods
                .into_iter()
                .map(|m| (m.name.clone(), Arc::new(m)))
                .collect(),
            answer_headers,
            answer_headers_by_host: HashMap::new(),
        }
    }

    /// Fills `answer_headers_by_host` from the routes naming each method
    /// that strips only where it serves. A host-less route's are its own.
    pub fn scope_answers(&mut self, routes: &[crate::config::Route]) {
        for route in routes {
            let (Some(host), Some(name)) = (&route.host, &route.method) else {
                continue;
            };
            let Some(Kind::External(e)) = self.by_name.get(name).map(|m| &m.kind) else {
                continue;
            };
            if e.config().strip_everywhere {
                continue;
            }
            let names = self.answer_headers_by_host.entry(host_key(host));
            let names = names.or_default();
            names.extend(e.config().response_headers.iter().cloned());
            names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            names.dedup();
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Authenticator>> {
        self.by_name.get(name)
    }
}

/// A route's host as `answer_headers_by_host` keys it: the name, or
/// `*.domain`.
pub fn host_key(host: &crate::config::HostMatch) -> String {
    match host {
        crate::config::HostMatch::Exact(h) => h.clone(),
        crate::config::HostMatch::Suffix(s) => format!("*{s}"),
    }
}

/// The answer headers an identity map reads.
pub fn header_sources(map: &IdentityMap) -> Vec<HeaderName> {
    [&map.tenant, &map.user, &map.plan]
        .into_iter()
        .filter_map(|s| match s {
            Some(IdSource::Header(h)) => Some(h.clone()),
            _ => None,
        })
        .collect()
}

/// What a method itself says of the caller: an API key's record, a
/// basic-auth user name; nothing for an external service (its answer's
/// headers are read through the map).
#[derive(Default)]
pub struct Native {
    pub tenant: Option<String>,
    pub user: Option<String>,
    pub plan: Option<String>,
}

/// The identity of an authenticated request: each field from the map
/// (`answer` holds the external answer's headers), else the method's own;
/// the plan then falls back to the tenant's override and
/// `auth.default_plan`. `Ok(None)`: authenticated, but no tenant (tenant
/// scopes cannot key it).
pub fn identity(
    map: &IdentityMap,
    native: Native,
    answer: Option<&HeaderMap>,
    auth: &Auth,
    tenants: &BTreeMap<String, TenantOverride>,
) -> Result<Option<Identity>, AuthError> {
    let resolve = |source: &Option<IdSource>, own: Option<String>| match source {
        None => own,
        Some(IdSource::Value(v)) => Some(v.clone()),
        Some(IdSource::Username) => native.user.clone(),
        Some(IdSource::Header(h)) => answer
            .and_then(|a| a.get(h))
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty()),
    };
    let Some(tenant) = resolve(&map.tenant, native.tenant.clone()) else {
        return Ok(None);
    };
    let tenant = TenantId::new(&tenant).ok_or(AuthError::TenantInvalid)?;
    let user = resolve(&map.user, native.user.clone());
    if user.as_ref().is_some_and(|u| u.len() > MAX_ID_BYTES) {
        return Err(AuthError::ClaimInvalid);
    }
    let plan = resolve(&map.plan, native.plan.clone())
        .or_else(|| tenants.get(tenant.as_str()).and_then(|t| t.plan.clone()))
        .unwrap_or_else(|| auth.default_plan.clone());
    Ok(Some(Identity {
        tenant,
        user,
        plan,
        token: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        crate::config::Config::read_text(
            "t.yaml",
            "auth: {methods: {k: {api_key: {header: x-key, keys: 'keys: []'}}}}\nroutes: []\n",
            std::path::Path::new("."),
        )
        .config
        .and_then(|c| c.auth)
        .expect("a config with auth")
    }

    #[test]
    fn the_map_wins_over_the_method_and_the_plan_falls_back() {
        let mut answer = HeaderMap::new();
        answer.insert("x-group", "acme".parse().unwrap());
        answer.insert("x-user", "ann@acme.test".parse().unwrap());
        let map = IdentityMap {
            tenant: Some(IdSource::Header(HeaderName::from_static("x-group"))),
            user: Some(IdSource::Header(HeaderName::from_static("x-user"))),
            plan: None,
        };
        let id = identity(
            &map,
            Native::default(),
            Some(&answer),
            &auth(),
            &BTreeMap::new(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(id.tenant.as_str(), "acme");
        assert_eq!(id.user.as_deref(), Some("ann@acme.test"));
        assert_eq!(id.plan, "free");
        let own = Native {
            tenant: Some("globex".into()),
            user: Some("bot".into()),
            plan: Some("pro".into()),
        };
        let id = identity(
            &IdentityMap::default(),
            own,
            None,
            &auth(),
            &BTreeMap::new(),
        )
        .unwrap()
        .unwrap();
        assert_eq!((id.tenant.as_str(), id.plan.as_str()), ("globex", "pro"));
    }

    fn external(strip_everywhere: bool) -> Authenticator {
        let config = crate::config::External {
            url: "http://127.0.0.1:9/auth".into(),
            method: http::Method::GET,
            timeout: std::time::Duration::from_secs(1),
            request_headers: vec![http::header::COOKIE],
            response_headers: vec![
                HeaderName::from_static("x-auth-request-user"),
                http::header::AUTHORIZATION,
            ],
            strip_everywhere,
            challenge_headers: vec![],
            set_headers: vec![],
            signin: None,
            cache: None,
            breaker: crate::config::Breaker {
                failures: 3,
                open_for: std::time::Duration::from_secs(5),
            },
            ca_file: None,
        };
        let ext = ExternalAuth::new("sso", &config, vec![], &[]);
        Authenticator {
            name: "sso".into(),
            kind: Kind::External(Box::new(ext)),
            identity: IdentityMap::default(),
        }
    }

    #[test]
    fn answer_headers_are_stripped_everywhere_only_when_asked_and_never_an_input() {
        let all = Authenticators::new(vec![external(true)]);
        assert_eq!(
            all.answer_headers,
            ["x-auth-request-user"],
            "Authorization is an input"
        );
        let own = Authenticators::new(vec![external(false)]);
        assert!(
            own.answer_headers.is_empty(),
            "an Ingress's method replaces them on its routes"
        );
    }

    #[test]
    fn no_tenant_is_no_identity_and_a_bad_one_is_refused() {
        let map = IdentityMap {
            tenant: Some(IdSource::Header(HeaderName::from_static("x-group"))),
            ..Default::default()
        };
        assert_eq!(
            identity(&map, Native::default(), None, &auth(), &BTreeMap::new()),
            Ok(None)
        );
        let mut answer = HeaderMap::new();
        answer.insert("x-group", "a,b".parse().unwrap());
        assert_eq!(
            identity(
                &map,
                Native::default(),
                Some(&answer),
                &auth(),
                &BTreeMap::new()
            ),
            Err(AuthError::TenantInvalid)
        );
    }
}
