//! The quota headers (draft-ietf-httpapi-ratelimit-headers and the legacy
//! `X-RateLimit-*` trio) of a decision, and their merge with an upstream's
//! own. Serialised with `sfv`; no policy lives here.

use http::header::HeaderName;

/// The quota headers of a decision. `RateLimit-Policy` lists every bucket
/// the route spends, in the route's order, so it is the same on every
/// response of the route; `RateLimit` and the legacy trio describe the one
/// reported (the tightest, or the one that refused). Structured fields
/// (RFC 8941) as the IETF draft has them: `"api";q=100;w=60`.
pub fn quota_headers(
    mode: crate::config::QuotaHeaders,
    policies: &[(&str, &crate::config::Bucket)],
    reported: (&str, &crate::config::Bucket, u64, u64),
) -> Vec<(HeaderName, String)> {
    use crate::config::QuotaHeaders;
    let (limit, bucket, remaining, reset_after_ms) = reported;
    let reset = reset_after_ms.div_ceil(1000);
    let mut out = Vec::new();
    if matches!(mode, QuotaHeaders::Ietf | QuotaHeaders::Both) {
        let policy = sf_list(policies.iter().map(|(name, b)| {
            let window = (b.capacity.get() * b.rate.interval_us()).div_ceil(1_000_000);
            (*name, [("q", int(b.capacity.get())), ("w", int(window))])
        }));
        let state = sf_list([(limit, [("r", int(remaining)), ("t", int(reset))])]);
        out.extend(policy.map(|v| (HeaderName::from_static("ratelimit-policy"), v)));
        out.extend(state.map(|v| (HeaderName::from_static("ratelimit"), v)));
    }
    if matches!(mode, QuotaHeaders::Legacy | QuotaHeaders::Both) {
        out.push((
            HeaderName::from_static("x-ratelimit-limit"),
            bucket.capacity.to_string(),
        ));
        out.push((
            HeaderName::from_static("x-ratelimit-remaining"),
            remaining.to_string(),
        ));
        out.push((
            HeaderName::from_static("x-ratelimit-reset"),
            reset.to_string(),
        ));
    }
    out
}

pub(crate) fn int(n: u64) -> sfv::RefBareItem<'static> {
    sfv::RefBareItem::Integer(
        i64::try_from(n)
            .unwrap_or(i64::MAX)
            .min(999_999_999_999_999),
    )
}

/// Policies as a structured-field List (`"api";q=100;w=60, ...`), written
/// straight into the text: this runs on every limited response.
pub(crate) fn sf_list<'a, const N: usize>(
    members: impl IntoIterator<Item = (&'a str, [(&'a str, sfv::RefBareItem<'a>); N])>,
) -> Option<String> {
    let mut out = String::new();
    for (name, params) in members {
        let mut member = sfv::RefListSerializer::new(&mut out)
            .bare_item(&sfv::RefBareItem::String(name))
            .ok()?;
        for (key, value) in &params {
            member = member.parameter(key, value).ok()?;
        }
    }
    Some(out)
}

/// Whether `name` is one of the draft's two List fields, which an
/// upstream may send too.
pub fn is_quota_list(name: &HeaderName) -> bool {
    name == "ratelimit-policy" || name == "ratelimit"
}

/// The upstream's own members of a quota List field, then the gateway's:
/// a member of the upstream named like one of the gateway's is replaced,
/// and a field value of the upstream that is not a structured List is
/// dropped (a parser would discard the whole field for it).
pub fn merge_quota<'a>(theirs: impl Iterator<Item = &'a [u8]>, ours: &str) -> String {
    use sfv::{ListEntry, Parser};
    let name = |e: &ListEntry| match e {
        ListEntry::Item(i) => i.bare_item.as_str().map(str::to_string),
        ListEntry::InnerList(_) => None,
    };
    let Ok(ours_list) = Parser::parse_list(ours.as_bytes()) else {
        return ours.to_string();
    };
    let taken: Vec<Option<String>> = ours_list.iter().map(name).collect();
    let joined = theirs.collect::<Vec<_>>().join(&b", "[..]);
    let mut merged: sfv::List = match Parser::parse_list(&joined) {
        Ok(list) if !joined.is_empty() => list
            .into_iter()
            .filter(|e| !taken.contains(&name(e)))
            .collect(),
        _ => Vec::new(),
    };
    merged.extend(ours_list);
    sfv::SerializeValue::serialize_value(&merged).unwrap_or_else(|_| ours.to_string())
}
