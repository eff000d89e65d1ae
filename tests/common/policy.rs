//! The one policy builder: the preamble every suite's config starts with
//! (the proxy listener on `$LISTEN`, the admin listener on `$ADMIN`, the
//! store, the warnings the suite accepts, the shared HS256 `auth` key when
//! asked for), then the suite's own sections. It writes text, as a suite
//! would by hand; `Gateway` starts it.

use super::*;

/// A config under construction. Without `store`, the store is `memory`
/// and its warning (`store.process_local`) is acknowledged, as every
/// single-process test means it.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    server: Vec<String>,
    admin: Vec<String>,
    store: Option<String>,
    acknowledge: Vec<String>,
    auth: Option<Vec<String>>,
    sections: Vec<String>,
    env: Vec<(String, String)>,
}

impl Policy {
    pub fn new() -> Policy {
        Policy::default()
    }

    /// More keys of `server:` beside `listen`: YAML at the section's level,
    /// one key a line, nested lines indented below their key.
    pub fn server(mut self, keys: &str) -> Policy {
        self.server.extend(lines(keys));
        self
    }

    /// More entries of the `admin:` flow mapping beside `listen`, e.g.
    /// `token_env: NAME`.
    pub fn admin(mut self, entries: &str) -> Policy {
        self.admin.push(entries.to_string());
        self
    }

    /// The whole `store:` value, e.g. `{kind: redis, url: "..."}`, in place
    /// of the acknowledged memory store.
    pub fn store(mut self, mapping: &str) -> Policy {
        self.store = Some(mapping.to_string());
        self
    }

    /// A warning code the suite accepts, beside the memory store's.
    pub fn acknowledge(mut self, code: &str) -> Policy {
        self.acknowledge.push(code.to_string());
        self
    }

    /// `AUTH_HS256`: the shared HS256 key (kid `t`), its secret given to the
    /// gateway as `FAIRGATE_TEST_JWT`, so `token()` is accepted.
    pub fn hs256(mut self) -> Policy {
        self.auth.get_or_insert_with(Vec::new);
        self
    }

    /// `hs256`, with more `auth:` keys: YAML at the section's level.
    pub fn auth(mut self, keys: &str) -> Policy {
        self.auth.get_or_insert_with(Vec::new).extend(lines(keys));
        self
    }

    /// The suite's own sections (upstreams, limits, routes, ...), after the
    /// preamble, as written.
    pub fn sections(mut self, yaml: &str) -> Policy {
        self.sections.push(yaml.to_string());
        self
    }

    /// One upstream `api` at `target` and one route `all` sending every
    /// request to it, without authentication or limits.
    pub fn catch_all(self, target: impl std::fmt::Display) -> Policy {
        self.sections(&format!(
            "upstreams: {{api: {{targets: [\"{target}\"]}}}}\n\
             routes:\n  - {{name: all, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true}}"
        ))
    }

    /// An environment variable of the gateway process.
    pub fn env(mut self, name: &str, value: &str) -> Policy {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// The config's text, placeholders (`$LISTEN`, `$ADMIN`, `$DIR`) left
    /// for `Gateway` to fill.
    pub fn yaml(&self) -> String {
        let mut out = String::from("server:\n  listen: [\"$LISTEN\"]\n");
        for line in &self.server {
            out += &format!("  {line}\n");
        }
        let admin: String = self.admin.iter().map(|e| format!(", {e}")).collect();
        out += &format!("admin: {{listen: \"$ADMIN\"{admin}}}\n");
        let mut acknowledge = self.acknowledge.clone();
        match &self.store {
            Some(store) => out += &format!("store: {store}\n"),
            None => {
                out += "store: {kind: memory}\n";
                acknowledge.insert(0, "store.process_local".into());
            }
        }
        if !acknowledge.is_empty() {
            out += &format!("acknowledge: [{}]\n", acknowledge.join(", "));
        }
        if let Some(auth) = &self.auth {
            out += AUTH_HS256;
            out += "\n";
            for line in auth {
                out += &format!("  {line}\n");
            }
        }
        for section in &self.sections {
            out += section.trim_matches('\n');
            out += "\n";
        }
        out
    }

    /// Starts the gateway on this config and waits until it is ready.
    pub async fn start(&self) -> Gateway {
        self.start_with(GatewayOptions::default()).await
    }

    /// As `start`, with `options`; the policy's environment is added to theirs.
    pub async fn start_with(&self, mut options: GatewayOptions) -> Gateway {
        options.env.extend(self.env.iter().cloned());
        if self.auth.is_some() {
            Gateway::start_hs256(&self.yaml(), options).await
        } else {
            Gateway::start_with(&self.yaml(), options).await
        }
    }
}

/// The non-empty lines of `text`, as written.
fn lines(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
}
