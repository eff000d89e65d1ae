//! Where the upstream's answer points, rewritten as nginx does:
//! `routes[].cookie_rewrite`, the `Domain` and `Path` of its `Set-Cookie`
//! headers (`proxy_cookie_domain`, `proxy_cookie_path`), and
//! `routes[].location_rewrite`, the start of its `Location` and `Refresh`
//! URLs (`proxy_redirect`); every other byte kept.

use pingora::http::ResponseHeader;

use crate::config::CookieRewrite;

/// Rewrites every `Set-Cookie` of `response` by `rules`.
pub fn rewrite(rules: &CookieRewrite, response: &mut ResponseHeader) -> pingora::Result<()> {
    let name = http::header::SET_COOKIE;
    let values: Vec<http::HeaderValue> = response.headers.get_all(&name).iter().cloned().collect();
    let rewritten: Vec<Option<String>> = values
        .iter()
        .map(|v| v.to_str().ok().and_then(|v| cookie(rules, v)))
        .collect();
    if rewritten.iter().all(Option::is_none) {
        return Ok(());
    }
    response.remove_header(&name);
    for (old, new) in values.into_iter().zip(rewritten) {
        match new {
            Some(new) => response.append_header(name.clone(), new)?,
            None => response.append_header(name.clone(), old)?,
        };
    }
    Ok(())
}

/// One `Set-Cookie` value with its attributes rewritten, or None when
/// none applies.
fn cookie(rules: &CookieRewrite, value: &str) -> Option<String> {
    let mut changed = false;
    let mut parts: Vec<String> = Vec::new();
    for (i, part) in value.split(';').enumerate() {
        let attribute = part.split_once('=').filter(|_| i > 0);
        let new = attribute.and_then(|(key, v)| {
            let lead = &key[..key.len() - key.trim_start().len()];
            match key.trim().to_ascii_lowercase().as_str() {
                "domain" => {
                    let (from, to) = rules.domain.as_ref()?;
                    let bare = |d: &str| d.trim().trim_start_matches('.').to_ascii_lowercase();
                    // nginx keeps the cookie's leading dot.
                    let dot = if v.trim().starts_with('.') { "." } else { "" };
                    let to = to.trim_start_matches('.');
                    (bare(v) == bare(from)).then(|| format!("{lead}{}={dot}{to}", key.trim()))
                }
                "path" => {
                    let (from, to) = rules.path.as_ref()?;
                    let rest = v.trim().strip_prefix(from.as_str())?;
                    Some(format!("{lead}{}={to}{rest}", key.trim()))
                }
                _ => None,
            }
        });
        changed |= new.is_some();
        parts.push(new.unwrap_or_else(|| part.to_string()));
    }
    changed.then(|| parts.join(";"))
}

/// `Location` (and a `Refresh`'s `url=`) starting with `from` starts with
/// `to` instead, as nginx's `proxy_redirect FROM TO`.
pub fn locations(rule: &(String, String), response: &mut ResponseHeader) -> pingora::Result<()> {
    let (from, to) = rule;
    let moved = |url: &str| {
        url.strip_prefix(from.as_str())
            .map(|rest| format!("{to}{rest}"))
    };
    let location = response.headers.get(http::header::LOCATION);
    if let Some(new) = location.and_then(|v| v.to_str().ok()).and_then(moved) {
        response.insert_header(http::header::LOCATION, new)?;
    }
    let refresh = response.headers.get(http::header::REFRESH);
    let new = refresh.and_then(|v| v.to_str().ok()).and_then(|v| {
        let at = v.to_ascii_lowercase().find("url=")? + 4;
        Some(format!("{}{}", &v[..at], moved(&v[at..])?))
    });
    if let Some(new) = new {
        response.insert_header(http::header::REFRESH, new)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> CookieRewrite {
        CookieRewrite {
            domain: Some(("app.svc.cluster.local".into(), "shop.example".into())),
            path: Some(("/app/".into(), "/".into())),
        }
    }

    #[test]
    fn domain_and_path_are_rewritten_as_nginx_does() {
        let r = rules();
        assert_eq!(
            cookie(
                &r,
                "sid=1; Domain=.APP.svc.cluster.local; Path=/app/cart; HttpOnly"
            )
            .as_deref(),
            Some("sid=1; Domain=.shop.example; Path=/cart; HttpOnly")
        );
        // Another domain, a path not under `from`, the cookie's own value: kept.
        assert_eq!(
            cookie(&r, "path=/app/; Domain=other.example; Path=/api"),
            None
        );
        assert_eq!(
            cookie(&r, "sid=2; path=/app/x").as_deref(),
            Some("sid=2; path=/x")
        );
    }

    #[test]
    fn location_and_refresh_urls_are_moved_at_their_start_only() {
        let rule = (
            "http://app.internal:8080/".to_string(),
            "https://shop.example/".to_string(),
        );
        let mut r = pingora::http::ResponseHeader::build(302, None).unwrap();
        let at = "http://app.internal:8080/cart?x=http://app.internal:8080/";
        r.insert_header("location", at).unwrap();
        r.insert_header("refresh", "5; URL=http://app.internal:8080/done")
            .unwrap();
        locations(&rule, &mut r).unwrap();
        assert_eq!(
            r.headers["location"],
            "https://shop.example/cart?x=http://app.internal:8080/"
        );
        assert_eq!(r.headers["refresh"], "5; URL=https://shop.example/done");
        let mut r = pingora::http::ResponseHeader::build(302, None).unwrap();
        r.insert_header("location", "/relative").unwrap();
        locations(&rule, &mut r).unwrap();
        assert_eq!(r.headers["location"], "/relative");
    }
}
