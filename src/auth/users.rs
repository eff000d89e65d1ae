//! A basic-auth method's user map (`users_file`): which tenant and plan
//! each htpasswd user belongs to, so that basic-auth requests spend their
//! tenant's buckets as a token's do.
//!
//! ```yaml
//! users:
//!   alice: {tenant: acme, plan: pro}
//!   bob: {tenant: globex}
//! ```

use std::collections::HashMap;

use marked_yaml::Node;

/// Who a user is, besides the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub tenant: String,
    pub plan: Option<String>,
}

/// Users by name.
#[derive(Debug, Default)]
pub struct UserMap(HashMap<String, UserRecord>);

/// What is wrong with a users file: every problem, each with its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct UsersInvalid(pub Vec<String>);

impl UserMap {
    /// Reads a user map; every problem at once, each with its line.
    pub fn parse(text: &str) -> Result<UserMap, UsersInvalid> {
        let root = crate::config::yaml::load(text, |key| format!("duplicate key \"{key}\""))
            .map_err(|((line, _), message)| {
                UsersInvalid(vec![format!("line {line}: {message}")])
            })?;
        let mut problems = Vec::new();
        let mut users = HashMap::new();
        let top = root
            .as_mapping()
            .ok_or_else(|| UsersInvalid(vec!["the top level must be a mapping".into()]))?;
        for (key, _) in top.iter().filter(|(k, _)| k.as_str() != "users") {
            problems.push(format!(
                "line {}: unknown field; expected users",
                line(key.span())
            ));
        }
        let entries = top.get_mapping("users");
        for (name, node) in entries.iter().flat_map(|m| m.iter()) {
            match record(name.as_str(), node) {
                Ok(r) => {
                    users.insert(name.as_str().to_string(), r);
                }
                Err(why) => problems.push(format!(
                    "line {}: users.{}: {why}",
                    line(name.span()),
                    name.as_str()
                )),
            }
        }
        match problems.is_empty() {
            true => Ok(UserMap(users)),
            false => Err(UsersInvalid(problems)),
        }
    }

    pub fn get(&self, user: &str) -> Option<&UserRecord> {
        self.0.get(user)
    }
}

fn line(span: &marked_yaml::Span) -> usize {
    span.start().map_or(1, |m| m.line())
}

/// One user's `{tenant, plan}`.
fn record(name: &str, node: &Node) -> Result<UserRecord, String> {
    if name.is_empty() || name.len() > super::MAX_ID_BYTES {
        return Err("a user name of 1 to 256 bytes".into());
    }
    let map = node.as_mapping().ok_or("must be {tenant: T, plan: P}")?;
    if let Some((k, _)) = map
        .iter()
        .find(|(k, _)| !["tenant", "plan"].contains(&k.as_str()))
    {
        return Err(format!(
            "{}: unknown field; expected tenant, plan",
            k.as_str()
        ));
    }
    let text = |key: &str| map.get_scalar(key).map(|s| s.as_str().to_string());
    let tenant = text("tenant").ok_or("tenant: required")?;
    if !super::tenant_id_ok(&tenant) {
        return Err("tenant: not a tenant id ([A-Za-z0-9._@-]{1,128})".into());
    }
    let plan = text("plan");
    if plan.as_ref().is_some_and(|p| p.is_empty() || p.len() > 64) {
        return Err("plan: 1 to 64 bytes".into());
    }
    Ok(UserRecord { tenant, plan })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_name_their_tenant_and_plan() {
        let map =
            UserMap::parse("users:\n  alice: {tenant: acme, plan: pro}\n  bob: {tenant: globex}\n")
                .unwrap();
        let alice = map.get("alice").unwrap();
        assert_eq!(
            (alice.tenant.as_str(), alice.plan.as_deref()),
            ("acme", Some("pro"))
        );
        assert_eq!(map.get("bob").unwrap().plan, None);
        assert_eq!(map.get("carol"), None);
    }

    #[test]
    fn every_problem_is_said_with_its_line() {
        let text = "users:\n  alice: {tenant: \"a,b\"}\n  bob: {team: x, tenant: t}\n  cy: {plan: pro}\nother: 1\n";
        let e = UserMap::parse(text).unwrap_err().to_string();
        assert!(e.contains("line 5: unknown field; expected users"), "{e}");
        assert!(
            e.contains("line 2: users.alice: tenant: not a tenant id"),
            "{e}"
        );
        assert!(e.contains("line 3: users.bob: team: unknown field"), "{e}");
        assert!(e.contains("line 4: users.cy: tenant: required"), "{e}");
    }
}
