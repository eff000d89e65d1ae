//! Secrets that ride in URLs: a URL's user information (a password) and
//! query (a token), anywhere in a text, become `***`. The one masking of
//! them, for `check`'s problem lines (and so the reload log) and for
//! `GET /v1/policy`. A leaf: it imports nothing from the crate.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// `text` with every URL's user information and query as `***`. The user
/// information runs to the last `@` before a space, so a password holding
/// `/`, `?` or `#` (unencoded, the very URLs that fail to parse) is hidden
/// whole; an `@` in a path hides the path too, which costs nothing.
pub fn urls(text: &str) -> Cow<'_, str> {
    static USERINFO: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)([a-z][a-z0-9+.-]*://)[^\s]*@").expect("valid regex"));
    static QUERY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?i)([a-z][a-z0-9+.-]*://[^\s"'?#]*)\?[^\s"'#]*"#).expect("valid regex")
    });
    match USERINFO.replace_all(text, "$1***@") {
        Cow::Borrowed(text) => QUERY.replace_all(text, "$1?***"),
        Cow::Owned(masked) => Cow::Owned(QUERY.replace_all(&masked, "$1?***").into_owned()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn user_information_and_queries_are_hidden_whatever_they_hold() {
        let cases = [
            (
                "redis://:TOPSECRET@127.0.0.1:6379/0#x",
                "redis://***@127.0.0.1:6379/0#x",
            ),
            ("ftp://u:PW@h/jwks?token=Q#f", "ftp://***@h/jwks?***#f"),
            ("http://u:OT@collector:4318", "http://***@collector:4318"),
            ("redis://:p#ss@h:6379", "redis://***@h:6379"),
            ("redis://:p/ss@h:6379", "redis://***@h:6379"),
            ("http://u:p?w@otel:4318", "http://***@otel:4318"),
            ("redis://u:p@[::1]:6379/0?x", "redis://***@[::1]:6379/0?***"),
            (
                "https://idp.example.com/jwks",
                "https://idp.example.com/jwks",
            ),
            ("a://b", "a://b"),
            (
                "see http://a:b@h and https://c:d@k?t=1",
                "see http://***@h and https://***@k?***",
            ),
            ("5s", "5s"),
        ];
        for (text, shown) in cases {
            assert_eq!(super::urls(text), shown, "{text}");
        }
    }
}
