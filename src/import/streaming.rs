//! nginx's buffering annotations and ConfigMap keys (`proxy-buffering`,
//! `proxy-request-buffering`, the buffer and temporary-file sizes): fairgate
//! streams bodies both ways and has no such buffers, so there is nothing to
//! set; each is said, never refused.

use super::Verdict;

/// The keys, as annotations (without the prefix) and ConfigMap keys alike.
pub const KEYS: &[&str] = &[
    "client-body-buffer-size",
    "proxy-buffer-size",
    "proxy-buffering",
    "proxy-buffers-number",
    "proxy-busy-buffers-size",
    "proxy-max-temp-file-size",
    "proxy-request-buffering",
];

/// What one of `KEYS` becomes.
pub fn verdict(key: &str, value: &str) -> Verdict {
    match (key, value) {
        ("proxy-buffering", "off") => Verdict::Mapped(
            "fairgate streams responses to the client as they arrive, as off does".into(),
        ),
        ("proxy-buffering", _) => Verdict::Approximated(
            "fairgate streams responses as they arrive instead of buffering them: \
             a slow client holds the upstream connection as long as it reads"
                .into(),
        ),
        ("proxy-request-buffering", "off") => Verdict::Mapped(
            "fairgate streams request bodies upstream as they arrive, as off does".into(),
        ),
        ("proxy-request-buffering", _) => Verdict::Approximated(
            "fairgate streams request bodies upstream as they arrive instead of reading them whole first \
             (max_body still bounds them): the upstream sees a slow client's body as slowly"
                .into(),
        ),
        _ => Verdict::Mapped(
            "nothing to size: fairgate streams bodies both ways, through no buffer of this kind \
             and no temporary file"
                .into(),
        ),
    }
}
