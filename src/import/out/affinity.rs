//! A pool's `affinity` as the import writes it (ingress-nginx `affinity:
//! cookie` and `session-cookie-*`).

use crate::import::emit::{Fields, Key, Node};

keys! {
    AffinityKey at ["upstreams.<name>.affinity"] {
        Cookie = "cookie",
        Path = "path",
        Domain = "domain",
        MaxAge = "max_age",
        SameSite = "same_site",
        Secure = "secure",
        ChangeOnFailure = "change_on_failure",
    }
}

/// A pool's `affinity`: the cookie and its attributes as the policy
/// writes them (`same_site` lower case, `max_age` a duration).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Affinity {
    pub cookie: String,
    pub path: Option<String>,
    pub domain: Option<String>,
    pub max_age: Option<String>,
    pub same_site: Option<&'static str>,
    pub secure: bool,
    pub change_on_failure: bool,
}

impl Affinity {
    pub(super) fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(AffinityKey::Cookie, self.cookie.as_str());
        f.maybe(AffinityKey::Path, self.path.clone());
        f.maybe(AffinityKey::Domain, self.domain.clone());
        f.maybe(AffinityKey::MaxAge, self.max_age.clone());
        f.maybe(AffinityKey::SameSite, self.same_site);
        f.maybe(AffinityKey::Secure, self.secure.then_some(true));
        f.maybe(
            AffinityKey::ChangeOnFailure,
            self.change_on_failure.then_some(true),
        );
        f.node()
    }
}
