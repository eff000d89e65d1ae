//! `configuration-snippet`: nginx configuration, read as statements split
//! on `;` outside quotes and their words, carried over only when every
//! statement sets or clears a header (as header edits, with the nginx
//! variables fairgate's templates know); anything else leaves the whole
//! snippet untranslated.

use super::headers;
use super::out::{EditKey, Side};
use super::plan::Plan;
use super::Verdict;

/// nginx statements: split on `;` outside quotes, comments dropped.
pub fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut comment = false;
    for c in text.chars() {
        match (comment, quote, c) {
            (true, _, '\n') => comment = false,
            (true, ..) => {}
            (false, None, '#') => comment = true,
            (false, None, ';') => out.push(std::mem::take(&mut current)),
            (false, None, '"' | '\'') => {
                quote = Some(c);
                current.push(c);
            }
            (false, Some(q), _) if c == q => {
                quote = None;
                current.push(c);
            }
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A statement's words, quotes removed.
pub fn words(statement: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in statement.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                any = false;
            }
            None => current.push(c),
        }
    }
    if any || !current.is_empty() {
        out.push(current);
    }
    out
}

/// An nginx variable fairgate's templates have no equivalent for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nginx variable ${0} has no fairgate equivalent")]
pub struct UnknownVariable(pub String);

/// nginx variables fairgate templates know: `$host`, `$remote_addr`,
/// `$request_id`, `$uri`.
pub fn variables(value: &str) -> Result<String, UnknownVariable> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(after.len());
        let var = match &after[..end] {
            "host" => "{host}",
            "remote_addr" => "{client_ip}",
            "request_id" => "{request_id}",
            "uri" => "{path}",
            other => return Err(UnknownVariable(other.to_string())),
        };
        out.push_str(var);
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A `configuration-snippet` that only sets headers; anything else in it
/// makes the whole snippet unsupported.
pub fn snippet(text: &str, plan: &mut Plan) -> Verdict {
    let mut edits: Vec<(Side, EditKey, String, String)> = Vec::new();
    let mut partial = false;
    for statement in statements(text) {
        let words = words(&statement);
        let Some(directive) = words.first() else {
            continue;
        };
        let edit = match directive.as_str() {
            "more_set_headers"
                if words.len() >= 2 && words[1..].iter().all(|w| !w.starts_with('-')) =>
            {
                words[1..]
                    .iter()
                    .map(|h| match h.split_once(':') {
                        Some((n, v)) => Ok((
                            Side::Response,
                            EditKey::Set,
                            n.trim().to_string(),
                            v.trim().to_string(),
                        )),
                        None => Err(format!("more_set_headers {h:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()
            }
            "more_clear_headers" if words.len() >= 2 => Ok(words[1..]
                .iter()
                .map(|h| (Side::Response, EditKey::Remove, h.clone(), String::new()))
                .collect()),
            "add_header" if words.len() == 3 || (words.len() == 4 && words[3] == "always") => {
                partial |= words.len() == 3;
                Ok(vec![(
                    Side::Response,
                    EditKey::Add,
                    words[1].clone(),
                    words[2].clone(),
                )])
            }
            "proxy_set_header" if words.len() == 3 => Ok(vec![(
                Side::Request,
                EditKey::Set,
                words[1].clone(),
                words[2].clone(),
            )]),
            other => Err(format!("`{other}` does more than set a header")),
        };
        match edit {
            Ok(list) => edits.extend(list),
            Err(why) => {
                return Verdict::Unsupported(format!("{why}; the snippet is not translated"))
            }
        }
    }
    for (side, op, name, value) in &edits {
        if value.contains(['{', '}']) {
            return Verdict::Unsupported(format!("a {{ or }} in the value of {name}"));
        }
        let value = match variables(value) {
            Ok(v) => v,
            Err(why) => return Verdict::Unsupported(why.to_string()),
        };
        if let Err(why) = headers::edit(plan, *side, *op, name, &value) {
            return Verdict::Unsupported(why.to_string());
        }
    }
    match partial {
        true => Verdict::Approximated(
            "header edits; add_header without `always` set headers on 2xx/3xx answers only, fairgate on every upstream answer".into(),
        ),
        false => Verdict::Mapped("header edits (request_headers, response_headers)".into()),
    }
}

/// A `server-snippet` read as a `configuration-snippet` (header edits
/// only), on this Ingress's routes: approximated, since ingress-nginx
/// applied it to every path of the host.
pub fn server_snippet(text: &str, plan: &mut Plan) -> Verdict {
    match snippet(text, plan) {
        Verdict::Unsupported(why) => Verdict::Unsupported(why),
        Verdict::Mapped(what) | Verdict::Approximated(what) => Verdict::Approximated(format!(
            "{what}, on this Ingress's routes: ingress-nginx applied a server snippet to every path of its host"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::out::HeaderEdits;

    #[test]
    fn snippets_that_only_set_headers_are_read() {
        let mut plan = Plan::default();
        let v = snippet(
            "more_set_headers \"X-Frame-Options: DENY\";\n# a comment; with a semicolon\nproxy_set_header X-Real-Host $host;",
            &mut plan,
        );
        assert_eq!(
            v,
            Verdict::Mapped("header edits (request_headers, response_headers)".into())
        );
        let mut want = HeaderEdits::default();
        want.edit(EditKey::Set, "X-Real-Host", "{host}");
        assert_eq!(plan.keys.request_headers, Some(want));
        let v = snippet(
            "more_set_headers \"X-A: 1\"; rewrite ^ /x;",
            &mut Plan::default(),
        );
        assert!(matches!(v, Verdict::Unsupported(w) if w.contains("`rewrite`")));
        let v = snippet(
            "proxy_set_header X-Forwarded-For $remote_addr;",
            &mut Plan::default(),
        );
        assert!(matches!(v, Verdict::Unsupported(w) if w.contains("set by the gateway")));
    }
}
