//! Who owns a host (SPEC §11, "Sharing a cluster"): the operator's hosts
//! (the base policy's and a Gateway's listener hostnames, `--reserved`
//! in controller mode) are never taken by an Ingress, and a host and path,
//! or a host's certificate, belong to the oldest Ingress that claims them:
//! the Ingresses are imported oldest first (creation time, then
//! namespace/name), as ingress-nginx sorts them, and a later claim is
//! refused with a report line (an Event).

use super::manifests::Object;

/// The order Ingresses claim in: oldest first, then by namespace/name.
pub fn age(ing: &Object) -> (String, String) {
    let created = ing
        .text(&["metadata", "creationTimestamp"])
        .unwrap_or_default();
    (created, ing.id())
}

/// The operator's host `host` would take, if any: one it equals, or lies
/// under (`*.d` reserved); with `covering` (a certificate's names) also
/// one that a wildcard `host` covers.
pub fn reserved<'a>(reserved: &'a [String], host: &str, covering: bool) -> Option<&'a str> {
    let under = |name: &str, wildcard: &str| {
        wildcard
            .strip_prefix('*')
            .is_some_and(|suffix| name.len() > suffix.len() && name.ends_with(suffix))
    };
    let exact = reserved.iter().find(|r| *r == host);
    exact
        .or_else(|| {
            reserved
                .iter()
                .find(|r| under(host, r) || (covering && under(r, host)))
        })
        .map(String::as_str)
}

/// The report's words for a claim refused because Ingress `owner` has it.
pub fn taken(what: &str, owner: &str) -> String {
    format!(
        "{what} belongs to Ingress {owner}, which claimed it first; not served from this Ingress"
    )
}

/// The report's words for a claim on the operator's host `reserved`.
pub fn operators(what: &str, reserved: &str) -> String {
    format!("{what} is the operator's ({reserved}: the base policy's or the Gateway's); not served from this Ingress")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_hosts_are_equal_under_a_wildcard_or_covered() {
        let r = vec!["admin.lab".to_string(), "*.gw.lab".to_string()];
        assert_eq!(reserved(&r, "admin.lab", false), Some("admin.lab"));
        assert_eq!(reserved(&r, "x.gw.lab", false), Some("*.gw.lab"));
        assert_eq!(reserved(&r, "gw.lab", false), None);
        assert_eq!(
            reserved(&r, "*.lab", false),
            None,
            "a rule's wildcard yields"
        );
        assert_eq!(reserved(&r, "*.lab", true), Some("admin.lab"));
        assert_eq!(reserved(&r, "shop.lab", true), None);
    }
}
