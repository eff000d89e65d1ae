//! An `auth.methods` entry as the import writes it: what ingress-nginx's
//! external (`auth-url`) or basic (`auth-type`) authentication of one
//! Ingress became. Types and their writing only.

use crate::import::emit::{Fields, Key, Node};

keys! {
    MethodKey at ["auth.methods.<name>"] {
        External = "external",
        Basic = "basic",
        Identity = "identity",
    }
}

keys! {
    ExternalKey at ["auth.methods.<name>.external"] {
        Url = "url",
        Method = "method",
        ResponseHeaders = "response_headers",
        StripEverywhere = "strip_everywhere",
        SetHeaders = "set_headers",
        Signin = "signin",
        Cache = "cache",
    }
}

keys! {
    SigninKey at ["auth.methods.<name>.external.signin"] {
        Url = "url",
        Param = "param",
        Hosts = "hosts",
    }
}

keys! {
    AnswerCacheKey at ["auth.methods.<name>.external.cache"] {
        Cookie = "cookie",
        Header = "header",
        Ttl = "ttl",
    }
}

keys! {
    BasicKey at ["auth.methods.<name>.basic"] {
        Htpasswd = "htpasswd",
        Realm = "realm",
    }
}

keys! {
    IdentityKey at ["auth.methods.<name>.identity"] {
        User = "user",
    }
}

/// One method, named by its Ingress.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthMethod {
    External(Box<ExternalAuth>),
    Basic(BasicAuth),
}

/// `external`: a subrequest to the auth service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExternalAuth {
    pub url: String,
    /// Written when ingress-nginx's `auth-method` said one.
    pub method: Option<String>,
    /// Written when not empty.
    pub response_headers: Vec<String>,
    /// Written when not empty.
    pub set_headers: Vec<String>,
    pub signin: Option<SignIn>,
    pub cache: Option<AnswerCache>,
    /// `identity.user: {header: NAME}`.
    pub user_header: Option<String>,
}

/// `external.signin`.
#[derive(Debug, Clone, PartialEq)]
pub struct SignIn {
    pub url: String,
    /// Written when not `rd`.
    pub param: Option<String>,
    pub hosts: Vec<String>,
}

/// `external.cache`: the session value it is keyed by, and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerCache {
    pub cookie: Option<String>,
    pub header: Option<String>,
    pub ttl: String,
}

/// `basic`: the htpasswd entries themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct BasicAuth {
    pub htpasswd: String,
    pub realm: Option<String>,
}

// An identity source's `header` is read by config/read/methods.rs from
// its own list, not schema.rs.
#[derive(Debug, Clone, Copy)]
struct SourceHeaderKey;

impl Key for SourceHeaderKey {
    fn as_str(self) -> &'static str {
        "header"
    }
}

impl AuthMethod {
    pub fn node(&self) -> Node {
        let mut f = Fields::default();
        match self {
            AuthMethod::External(e) => {
                f.put(MethodKey::External, e.node());
                if let Some(header) = &e.user_header {
                    let mut source = Fields::default();
                    source.put(SourceHeaderKey, header.as_str());
                    let mut identity = Fields::default();
                    identity.put(IdentityKey::User, source.node());
                    f.put(MethodKey::Identity, identity.node());
                }
            }
            AuthMethod::Basic(b) => {
                let mut basic = Fields::default();
                basic.put(BasicKey::Htpasswd, b.htpasswd.as_str());
                basic.maybe(BasicKey::Realm, b.realm.clone());
                f.put(MethodKey::Basic, basic.node());
            }
        }
        f.node()
    }
}

impl ExternalAuth {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(ExternalKey::Url, self.url.as_str());
        f.maybe(ExternalKey::Method, self.method.clone());
        if !self.response_headers.is_empty() {
            f.put(ExternalKey::ResponseHeaders, self.response_headers.clone());
        }
        // An Ingress's method replaces them on its host's routes only, as
        // ingress-nginx sets them in the annotated location only; and what
        // it reads never takes a header off the operator's strip list.
        f.put(ExternalKey::StripEverywhere, false);
        if !self.set_headers.is_empty() {
            f.put(ExternalKey::SetHeaders, self.set_headers.clone());
        }
        if let Some(s) = &self.signin {
            let mut signin = Fields::default();
            signin.put(SigninKey::Url, s.url.as_str());
            signin.maybe(SigninKey::Param, s.param.clone());
            signin.put(SigninKey::Hosts, s.hosts.clone());
            f.put(ExternalKey::Signin, signin.node());
        }
        if let Some(c) = &self.cache {
            let mut cache = Fields::default();
            cache.maybe(AnswerCacheKey::Cookie, c.cookie.clone());
            cache.maybe(AnswerCacheKey::Header, c.header.clone());
            cache.put(AnswerCacheKey::Ttl, c.ttl.as_str());
            f.put(ExternalKey::Cache, cache.node());
        }
        f.node()
    }
}
