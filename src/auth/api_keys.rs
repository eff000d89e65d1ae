//! API keys: reads a keys file (each key stored as its SHA-256, with the
//! tenant, user, plan and expiry it stands for) into `ApiKeys`, and checks a
//! presented key against it; `take_query_param` lifts a key out of a query
//! string so that it is never forwarded upstream. It opens no file (the
//! policy builder hands the text over) and builds no response: a refusal is
//! an `ApiKeyError` that `proxy::respond` turns into a 401. No message here
//! ever carries a key or a stored digest.

use std::collections::HashMap;

use marked_yaml::Node;

use super::MAX_ID_BYTES;
use crate::tenant::tenant_id_ok;

/// Longest key accepted, in bytes; a longer one is not hashed at all.
const MAX_KEY_BYTES: usize = 1024;

/// Longest plan accepted, in bytes (the bound the JWT path uses).
const MAX_PLAN_BYTES: usize = 64;

/// The fields an entry of `keys` may have.
const ENTRY_FIELDS: &str = "sha256, tenant, user, plan, expires";

/// Who a key says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// The tenant the key belongs to; passed `tenant_id_ok`.
    pub tenant: String,
    /// The user within the tenant, 1 to 256 bytes without control characters.
    pub user: Option<String>,
    /// The plan, 1 to 64 printable ASCII characters.
    pub plan: Option<String>,
    /// Unix seconds.
    pub expires: Option<i64>,
}

/// The keys of one keys file, by the SHA-256 digest of each key.
#[derive(Debug, Default)]
pub struct ApiKeys {
    by_digest: HashMap<[u8; 32], KeyRecord>,
}

/// Why a keys file was refused. Each problem names its line and field
/// (`keys[2].sha256`) and never quotes a digest or a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeysError {
    /// The text is not YAML, or its top level is not a mapping.
    #[error("line {line}: {message}")]
    Syntax {
        /// Where the YAML reader stopped.
        line: usize,
        /// The YAML reader's words.
        message: String,
    },
    /// A field the format does not have.
    #[error("line {line}: {field}: unknown field; expected one of {expected}")]
    UnknownField {
        /// Where the field's name is written.
        line: usize,
        /// Its path, the name shown only when it is a plain word.
        field: String,
        /// The fields allowed there.
        expected: &'static str,
    },
    /// A required field is absent.
    #[error("line {line}: {field}: required")]
    Missing {
        /// Where the mapping that lacks it starts.
        line: usize,
        /// The path of the absent field.
        field: String,
    },
    /// A value is ill-formed or out of bounds.
    #[error("line {line}: {field}: {problem}")]
    Invalid {
        /// Where the value is written.
        line: usize,
        /// The path of the value.
        field: String,
        /// What it must be; never the value itself.
        problem: &'static str,
    },
    /// A key written twice (digests compare case-insensitively).
    #[error("line {line}: {field}: the same key as keys[{first}]")]
    Duplicate {
        /// Where the second digest is written.
        line: usize,
        /// The path of the second digest.
        field: String,
        /// The index of the entry that holds it first.
        first: usize,
    },
    /// More than one problem, in the order they are written.
    #[error("{}", joined(.0))]
    Several(Vec<KeysError>),
}

fn joined(problems: &[KeysError]) -> String {
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    lines.join("; ")
}

/// Why a request's API key was refused. `reason()` is a bounded metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKeyError {
    /// No key was presented.
    Missing,
    /// The key is not in the keys file (or is empty or over-long).
    Unknown,
    /// The key's `expires` has passed.
    Expired,
}

impl ApiKeyError {
    /// Every refusal, for initialising metric series.
    pub const ALL: [ApiKeyError; 3] = [
        ApiKeyError::Missing,
        ApiKeyError::Unknown,
        ApiKeyError::Expired,
    ];

    /// The metric label and problem code.
    pub fn reason(self) -> &'static str {
        match self {
            ApiKeyError::Missing => "missing",
            ApiKeyError::Unknown => "unknown_key",
            ApiKeyError::Expired => "expired_key",
        }
    }

    /// Words for `error_description` and the problem `detail`. Never
    /// echoes the key.
    pub fn description(self) -> &'static str {
        match self {
            ApiKeyError::Missing => "no API key",
            ApiKeyError::Unknown => "the API key is not valid",
            ApiKeyError::Expired => "the API key has expired",
        }
    }
}

impl ApiKeys {
    /// Reads a keys file, reporting every problem at once. `keys: []`
    /// (or an empty `keys:`) is a valid file that refuses every key.
    pub fn parse(text: &str) -> Result<ApiKeys, KeysError> {
        let root = load(text)?;
        let mut problems = Vec::new();
        let entries = top_level(&root, &mut problems);
        let mut by_digest = HashMap::with_capacity(entries.len());
        let mut first_index: HashMap<[u8; 32], usize> = HashMap::new();
        for (index, node) in entries.into_iter().enumerate() {
            let Some((digest, line, record)) = read_entry(index, node, &mut problems) else {
                continue;
            };
            if let Some(&first) = first_index.get(&digest) {
                problems.push(KeysError::Duplicate {
                    line,
                    field: format!("keys[{index}].sha256"),
                    first,
                });
                continue;
            }
            first_index.insert(digest, index);
            by_digest.insert(digest, record);
        }
        match problems.len() {
            0 => Ok(ApiKeys { by_digest }),
            1 => Err(problems.remove(0)),
            _ => Err(KeysError::Several(problems)),
        }
    }

    /// How many keys the file holds.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether the file holds no key (every key is then refused).
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The record of `key` (its SHA-256 looked up, then compared with the
    /// stored digest in constant time), refused when expired at `now` (Unix
    /// seconds; expired when now >= expires). Keys over 1024 bytes or empty
    /// are Unknown.
    pub fn check(&self, key: &str, now: i64) -> Result<&KeyRecord, ApiKeyError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(ApiKeyError::Unknown);
        }
        let computed = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.as_bytes());
        let computed: &[u8] = computed.as_ref();
        let Ok(digest) = <[u8; 32]>::try_from(computed) else {
            return Err(ApiKeyError::Unknown);
        };
        let (stored, record) = self
            .by_digest
            .get_key_value(&digest)
            .ok_or(ApiKeyError::Unknown)?;
        if !same_digest(stored, &digest) {
            return Err(ApiKeyError::Unknown);
        }
        match record.expires {
            Some(expires) if now >= expires => Err(ApiKeyError::Expired),
            _ => Ok(record),
        }
    }
}

/// Compares two digests without stopping at the first difference.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Parses the text into a located tree whose top level is a mapping.
fn load(text: &str) -> Result<Node, KeysError> {
    crate::config::yaml::load(text, |key| {
        format!("{}: duplicate key", shown_name("", key))
    })
    .map_err(|((line, _), message)| KeysError::Syntax { line, message })
}

/// The entries under `keys`, after reporting unknown top-level fields and
/// a missing or ill-shaped `keys`.
fn top_level<'a>(root: &'a Node, problems: &mut Vec<KeysError>) -> Vec<&'a Node> {
    let Some(map) = root.as_mapping() else {
        return Vec::new();
    };
    for (key, _) in map.iter() {
        if key.as_str() != "keys" {
            problems.push(KeysError::UnknownField {
                line: key.span().start().map_or(1, |m| m.line()),
                field: shown_name("", key.as_str()),
                expected: "keys",
            });
        }
    }
    match map.get_node("keys") {
        None => {
            problems.push(KeysError::Missing {
                line: line_of(root),
                field: "keys".into(),
            });
            Vec::new()
        }
        Some(Node::Sequence(seq)) => seq.iter().collect(),
        Some(node) if is_null(node) => Vec::new(),
        Some(node) => {
            problems.push(KeysError::Invalid {
                line: line_of(node),
                field: "keys".into(),
                problem: "must be a list",
            });
            Vec::new()
        }
    }
}

/// One entry of `keys`: its digest, the line of its `sha256` and its
/// record, or `None` after its problems are recorded.
fn read_entry(
    index: usize,
    node: &Node,
    problems: &mut Vec<KeysError>,
) -> Option<([u8; 32], usize, KeyRecord)> {
    let path = format!("keys[{index}]");
    let Some(map) = node.as_mapping() else {
        problems.push(KeysError::Invalid {
            line: line_of(node),
            field: path,
            problem: "must be a mapping",
        });
        return None;
    };
    let before = problems.len();
    for (key, _) in map.iter() {
        if !ENTRY_FIELDS.split(", ").any(|f| f == key.as_str()) {
            problems.push(KeysError::UnknownField {
                line: key.span().start().map_or(1, |m| m.line()),
                field: shown_name(&path, key.as_str()),
                expected: ENTRY_FIELDS,
            });
        }
    }
    let mut entry = Entry {
        map,
        path,
        line: line_of(node),
        problems,
    };
    let sha = entry.field("sha256", true, hex_digest, "must be 64 hex digits");
    let tenant = entry.field(
        "tenant",
        true,
        |s| tenant_id_ok(s).then(|| s.to_string()),
        "must be 1 to 128 of A-Z a-z 0-9 . _ @ -",
    );
    let user = entry.field(
        "user",
        false,
        |s| user_ok(s).then(|| s.to_string()),
        "must be 1 to 256 bytes without control characters",
    );
    let plan = entry.field(
        "plan",
        false,
        |s| plan_ok(s).then(|| s.to_string()),
        "must be 1 to 64 printable ASCII characters",
    );
    let expires = entry.field(
        "expires",
        false,
        |s| s.parse::<jiff::Timestamp>().ok().map(|t| t.as_second()),
        "must be an RFC 3339 time such as 2027-01-01T00:00:00Z",
    );
    if entry.problems.len() > before {
        return None;
    }
    let ((digest, line), (tenant, _)) = (sha?, tenant?);
    let record = KeyRecord {
        tenant,
        user: user.map(|(u, _)| u),
        plan: plan.map(|(p, _)| p),
        expires: expires.map(|(e, _)| e),
    };
    Some((digest, line, record))
}

/// One entry being read, recording its problems as it goes.
struct Entry<'a, 'p> {
    map: &'a marked_yaml::types::MarkedMappingNode,
    path: String,
    line: usize,
    problems: &'p mut Vec<KeysError>,
}

impl Entry<'_, '_> {
    /// The value of field `name` as `read` makes it, with the line it is
    /// written on; `None` when absent (a problem too when `required`) or
    /// when `read` refuses it (then `problem` is recorded).
    fn field<T>(
        &mut self,
        name: &str,
        required: bool,
        read: fn(&str) -> Option<T>,
        problem: &'static str,
    ) -> Option<(T, usize)> {
        let field = format!("{}.{name}", self.path);
        let node = match self.map.get_node(name) {
            Some(node) if !is_null(node) => node,
            _ => {
                if required {
                    self.problems.push(KeysError::Missing {
                        line: self.line,
                        field,
                    });
                }
                return None;
            }
        };
        let line = line_of(node);
        match node.as_scalar().and_then(|s| read(s.as_str())) {
            Some(value) => Some((value, line)),
            None => {
                self.problems.push(KeysError::Invalid {
                    line,
                    field,
                    problem,
                });
                None
            }
        }
    }
}

/// The 32 bytes of 64 hex digits, either case.
fn hex_digest(text: &str) -> Option<[u8; 32]> {
    fn nibble(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (out, pair) in digest.iter_mut().zip(bytes.chunks_exact(2)) {
        *out = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(digest)
}

/// The user is forwarded in a header: no control characters.
fn user_ok(user: &str) -> bool {
    (1..=MAX_ID_BYTES).contains(&user.len()) && !user.chars().any(char::is_control)
}

/// The plan is forwarded as a header and selects a policy: keep it plain.
fn plan_ok(plan: &str) -> bool {
    (1..=MAX_PLAN_BYTES).contains(&plan.len()) && plan.bytes().all(|b| b.is_ascii_graphic())
}

/// A field's path for a message. A name that is not a short plain word is
/// not shown: it may be a key or a digest written in the wrong place.
fn shown_name(path: &str, name: &str) -> String {
    let bytes = name.as_bytes();
    let plain = (1..=16).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
    let name = if plain { name } else { "(name not shown)" };
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn line_of(node: &Node) -> usize {
    node.span().start().map_or(1, |m| m.line())
}

/// An unquoted empty value, `~` or `null`: the field is treated as absent.
fn is_null(node: &Node) -> bool {
    node.as_scalar().is_some_and(|s| {
        s.may_coerce() && matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL")
    })
}

/// Splits the key out of a query string: the first value of parameter
/// `name` (percent-decoded: %XX and '+' as space), and the query with EVERY
/// `name=...` pair (and a bare `name`) removed, other pairs kept byte for
/// byte in order ("" when none remain). Parameter names compare after
/// percent-decoding, so `api%5Fkey=x` is also taken and removed when name is
/// `api_key`. A bare `name` carries no value; `name=` carries the empty
/// one. When `name` is absent the query comes back unchanged; otherwise
/// empty segments (`a&&b`) are dropped with it.
pub fn take_query_param(query: &str, name: &str) -> (Option<String>, String) {
    let mut value = None;
    let mut kept: Vec<&str> = Vec::new();
    let mut found = false;
    for pair in query.split('&') {
        let (raw_name, raw_value) = match pair.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (pair, None),
        };
        if percent_decode(raw_name) != name.as_bytes() {
            if !pair.is_empty() {
                kept.push(pair);
            }
            continue;
        }
        found = true;
        if value.is_none() {
            if let Some(raw) = raw_value {
                value = Some(String::from_utf8_lossy(&percent_decode(raw)).into_owned());
            }
        }
    }
    if !found {
        return (None, query.to_string());
    }
    (value, kept.join("&"))
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space and `%XX`
/// a byte; a `%` not followed by two hex digits stays as written.
fn percent_decode(text: &str) -> Vec<u8> {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'+' => Some((b' ', 1)),
            b'%' => bytes
                .get(i + 1)
                .zip(bytes.get(i + 2))
                .and_then(|(&h, &l)| Some((hex(h)? << 4 | hex(l)?, 3))),
            _ => None,
        };
        let (byte, width) = decoded.unwrap_or((bytes[i], 1));
        out.push(byte);
        i += width;
    }
    out
}

#[cfg(test)]
mod tests;
