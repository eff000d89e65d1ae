//! Basic authentication (`Authorization: Basic`) against htpasswd entries:
//! parses the file's text as Apache `htpasswd` writes it (bcrypt, `{SHA}`,
//! `$apr1$`), verifies a header's credentials at the same cost whoever
//! they name (one hash of each kind the file holds), and remembers credentials
//! verified before in a bounded, expiring cache keyed by a digest of the
//! header. Opens no file (the policy builder hands the text over), knows
//! nothing of responses or metrics, and never keeps, logs or reports a
//! password or a hash: errors name lines, the cache holds SHA-256 digests.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::digest;
use base64::Engine;
use md5::{Digest, Md5};

/// Longest `Authorization` value read, in bytes.
const MAX_HEADER_BYTES: usize = 4096;
/// Longest user name accepted from a header, in bytes.
const MAX_USER_BYTES: usize = 256;
/// Credentials remembered at once; when reached, expired entries are
/// dropped, then the cache starts over (a cold cache costs verifications,
/// never correctness).
const CACHE_ENTRIES: usize = 10_000;
/// How long verified credentials are remembered.
const CACHE_TTL: Duration = Duration::from_secs(300);
/// The salt and sum of a bcrypt hash (of cost 5, of a password nobody
/// sends): behind `$2y$NN$`, any cost, it is a decoy whose check costs
/// what a real hash of that cost does.
const DECOY_BCRYPT: &str = "IT02hfrdT8n1lg1biB9i.u3yQbCpVlJqoiNfaDJkVv18JsGj3VwoC";

/// The highest bcrypt cost accepted: about a quarter of a second a check
/// here; a higher one would let a client hold CPUs with wrong passwords.
pub const MAX_BCRYPT_COST: u32 = 12;

/// The alphabet of crypt(3) and of md5-crypt's encoding.
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const APR1_MAGIC: &str = "$apr1$";
const APR1_SALT_BYTES: usize = 8;
const APR1_SUM_CHARS: usize = 22;

/// Parsed htpasswd file: user name -> hash, and a decoy of each kind of
/// hash the file holds.
pub struct Htpasswd {
    users: HashMap<String, Hash>,
    decoys: BTreeMap<Work, Hash>,
}

/// One hash computation, by what it costs: a scheme, and bcrypt's cost.
/// A check's work is counted in these, and is the same whoever is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    Sha1,
    Apr1,
    Bcrypt { cost: u32 },
}

/// One user's stored hash, in a form that can be checked.
enum Hash {
    /// The whole `$2y$…` string, as `bcrypt::verify` takes it.
    Bcrypt(String),
    /// The SHA-1 digest of the password.
    Sha1([u8; 20]),
    /// md5-crypt with Apache's magic: the salt and the 22 encoded chars.
    Apr1 { salt: String, sum: [u8; 22] },
}

/// Why an htpasswd file was refused. Every message names the 1-based line
/// and, where useful, the hash scheme; never the hash or a password.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HtpasswdError {
    #[error("line {line}: no ':' between user and password hash")]
    NoColon { line: usize },
    #[error("line {line}: the user name is empty")]
    EmptyUser { line: usize },
    #[error("line {line}: the user is given twice (first on line {first})")]
    DuplicateUser { line: usize, first: usize },
    #[error(
        "line {line}: the password is not hashed as bcrypt, {{SHA}} or $apr1$ \
         (plain text, as htpasswd -p writes, is refused); \
         re-create the entry with htpasswd -B"
    )]
    PlainText { line: usize },
    #[error(
        "line {line}: crypt(3) DES (htpasswd -d) is refused: it uses only the first \
         8 characters of a password; re-create the entry with htpasswd -B"
    )]
    Crypt { line: usize },
    #[error(
        "line {line}: {scheme} is not a format htpasswd writes with -B, -s or -m; \
         re-create the entry with htpasswd -B"
    )]
    Unsupported { line: usize, scheme: &'static str },
    #[error("line {line}: malformed {scheme} hash")]
    Malformed { line: usize, scheme: &'static str },
    #[error(
        "line {line}: bcrypt cost {cost} is over {MAX_BCRYPT_COST}: each check would hold a \
         CPU for over a quarter of a second; re-create the entry with htpasswd -B -C {MAX_BCRYPT_COST} or lower"
    )]
    CostTooHigh { line: usize, cost: u32 },
    #[error("no entries: all {lines} lines are blank or comments")]
    Empty { lines: usize },
}

impl Htpasswd {
    /// Parses `user:hash` lines as Apache `htpasswd` writes them. Blank
    /// lines and lines starting with '#' are skipped; as in Apache's
    /// `mod_authn_file`, anything after a second ':' is ignored.
    /// Accepted hash forms: bcrypt (`$2y$`, `$2a$`, `$2b$`), SHA-1 (`{SHA}`
    /// then base64 of the 20-byte digest), Apache MD5 (`$apr1$salt$hash`).
    /// Refused, with an error naming the line: plain text, crypt(3) DES,
    /// `$1$`/`$5$`/`$6$`, a malformed hash of an accepted form, a line
    /// without ':', an empty user, a user given twice, and a file without
    /// entries.
    pub fn parse(text: &str) -> Result<Htpasswd, HtpasswdError> {
        let mut users = HashMap::new();
        let mut first_line: HashMap<&str, usize> = HashMap::new();
        let mut lines = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            lines = line;
            let raw = raw.trim_end();
            if raw.is_empty() || raw.starts_with('#') {
                continue;
            }
            let (user, hash) = entry(raw, line)?;
            if let Some(&first) = first_line.get(user) {
                return Err(HtpasswdError::DuplicateUser { line, first });
            }
            first_line.insert(user, line);
            users.insert(user.to_string(), hash);
        }
        if users.is_empty() {
            return Err(HtpasswdError::Empty { lines });
        }
        let decoys = users
            .values()
            .map(|h| (h.work(), Hash::decoy(h.work())))
            .collect();
        Ok(Htpasswd { users, decoys })
    }

    /// The number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are no users (never true of a parsed file).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `password` is `user`'s. Every check costs the same work
    /// whoever is named (see `check`), so timing tells neither which users
    /// exist nor how a user's password is hashed. SHA-1 and MD5 results
    /// are compared in constant time. bcrypt reads only a password's first
    /// 72 bytes, so longer passwords that share them are equal to it.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        self.check(user, password).0
    }

    /// Whether `password` is `user`'s, and the hashes computed to tell:
    /// one of each kind the file holds (scheme and bcrypt cost), in
    /// order; the user's own hash for its kind, a decoy that no password
    /// is taken from for every other kind, and for all of them when the
    /// user is unknown. Only the user's own hash can say yes.
    fn check(&self, user: &str, password: &str) -> (bool, Vec<Work>) {
        let own = self.users.get(user);
        let mut valid = false;
        let mut done = Vec::with_capacity(self.decoys.len());
        for (work, decoy) in &self.decoys {
            let mine = own.filter(|h| h.work() == *work);
            let hash = mine.unwrap_or(decoy);
            let matched = std::hint::black_box(hash.matches(password.as_bytes()));
            valid |= mine.is_some() & matched;
            done.push(hash.work());
        }
        (valid, done)
    }
}

impl fmt::Debug for Htpasswd {
    // Users and hashes stay out of logs and panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Htpasswd")
            .field("users", &self.users.len())
            .finish()
    }
}

/// The user and hash of one non-blank, non-comment line.
fn entry(line_text: &str, line: usize) -> Result<(&str, Hash), HtpasswdError> {
    let (user, rest) = line_text
        .split_once(':')
        .ok_or(HtpasswdError::NoColon { line })?;
    if user.is_empty() {
        return Err(HtpasswdError::EmptyUser { line });
    }
    let hash = rest.split(':').next().unwrap_or_default();
    Ok((user, Hash::parse(hash, line)?))
}

impl Hash {
    /// Recognises the scheme of a stored hash and checks its shape.
    fn parse(text: &str, line: usize) -> Result<Hash, HtpasswdError> {
        let malformed = |scheme| HtpasswdError::Malformed { line, scheme };
        let unsupported = |scheme| HtpasswdError::Unsupported { line, scheme };
        if ["$2y$", "$2a$", "$2b$"].iter().any(|p| text.starts_with(p)) {
            if !bcrypt_shaped(text) {
                return Err(malformed("bcrypt"));
            }
            let cost = bcrypt_cost(text);
            if cost > MAX_BCRYPT_COST {
                return Err(HtpasswdError::CostTooHigh { line, cost });
            }
            return Ok(Hash::Bcrypt(text.to_string()));
        }
        if let Some(encoded) = text.strip_prefix("{SHA}") {
            return sha1_digest(encoded)
                .map(Hash::Sha1)
                .ok_or(malformed("{SHA}"));
        }
        if let Some(rest) = text.strip_prefix(APR1_MAGIC) {
            return apr1_parts(rest).ok_or(malformed("$apr1$"));
        }
        if text.starts_with("$1$") {
            return Err(unsupported("MD5-crypt ($1$)"));
        }
        if text.starts_with("$5$") {
            return Err(unsupported("SHA-256-crypt ($5$)"));
        }
        if text.starts_with("$6$") {
            return Err(unsupported("SHA-512-crypt ($6$)"));
        }
        if text.len() == 13 && text.bytes().all(|b| ITOA64.contains(&b)) {
            return Err(HtpasswdError::Crypt { line });
        }
        Err(HtpasswdError::PlainText { line })
    }

    /// What checking a password against this hash costs.
    fn work(&self) -> Work {
        match self {
            Hash::Bcrypt(text) => Work::Bcrypt {
                cost: bcrypt_cost(text),
            },
            Hash::Sha1(_) => Work::Sha1,
            Hash::Apr1 { .. } => Work::Apr1,
        }
    }

    /// A hash of kind `work` that no password is taken from: checking one
    /// costs what checking a user's hash of that kind does.
    fn decoy(work: Work) -> Hash {
        match work {
            Work::Bcrypt { cost } => Hash::Bcrypt(format!("$2y${cost:02}${DECOY_BCRYPT}")),
            Work::Sha1 => Hash::Sha1([0; 20]),
            Work::Apr1 => Hash::Apr1 {
                salt: "fairgate".to_string(),
                sum: [b'.'; APR1_SUM_CHARS],
            },
        }
    }

    fn matches(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Hash::Sha1(stored) => {
                let computed = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                constant_time_eq(computed.as_ref(), stored)
            }
            Hash::Apr1 { salt, sum } => constant_time_eq(&apr1_sum(password, salt.as_bytes()), sum),
        }
    }
}

/// The cost of a bcrypt hash of the right shape.
fn bcrypt_cost(text: &str) -> u32 {
    text.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// `$2?$NN$` (cost 4 to 31) then bcrypt's base64 of a 16-byte salt (22
/// chars) and a 23-byte sum (31 chars), canonical: what the bcrypt crate
/// can check, so no entry's check is cheaper for being unreadable.
fn bcrypt_shaped(text: &str) -> bool {
    use base64::engine::{general_purpose::NO_PAD, GeneralPurpose};
    const BCRYPT64: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::BCRYPT, NO_PAD);
    let cost = text.get(4..6).and_then(|c| c.parse::<u32>().ok());
    let (mut salt, mut sum) = ([0u8; 16], [0u8; 23]);
    text.len() == 60
        && text.is_ascii()
        && text.as_bytes()[6] == b'$'
        && cost.is_some_and(|c| (4..=31).contains(&c))
        && BCRYPT64.decode_slice(&text[7..29], &mut salt) == Ok(16)
        && BCRYPT64.decode_slice(&text[29..], &mut sum) == Ok(23)
}

/// The digest of `{SHA}<base64>`: standard base64 with padding, 20 bytes.
fn sha1_digest(encoded: &str) -> Option<[u8; 20]> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    bytes.try_into().ok()
}

/// The salt and encoded sum of `$apr1$<salt>$<sum>` (the magic removed).
fn apr1_parts(rest: &str) -> Option<Hash> {
    let (salt, sum) = rest.split_once('$')?;
    if salt.len() > APR1_SALT_BYTES || sum.len() != APR1_SUM_CHARS {
        return None;
    }
    if !sum.bytes().all(|b| ITOA64.contains(&b)) {
        return None;
    }
    Some(Hash::Apr1 {
        salt: salt.to_string(),
        sum: sum.as_bytes().try_into().ok()?,
    })
}

/// md5-crypt (FreeBSD's, by Poul-Henning Kamp) with Apache's `$apr1$`
/// magic: the 22 chars after `$apr1$<salt>$`. `salt` is at most 8 bytes.
fn apr1_sum(password: &[u8], salt: &[u8]) -> [u8; 22] {
    let salt = &salt[..salt.len().min(APR1_SALT_BYTES)];
    let mut alternate = Md5::new();
    alternate.update(password);
    alternate.update(salt);
    alternate.update(password);
    let alternate = alternate.finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(APR1_MAGIC.as_bytes());
    ctx.update(salt);
    for chunk in password.chunks(16) {
        ctx.update(&alternate[..chunk.len()]);
    }
    // The original's quirk: a zero byte for each set bit of the length,
    // the password's first byte for each clear one.
    let mut bits = password.len();
    while bits != 0 {
        if bits & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut sum = ctx.finalize();

    // Meant to slow brute force down, at 1990s speeds.
    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round % 2 == 1 {
            ctx.update(password);
        } else {
            ctx.update(sum);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(password);
        }
        if round % 2 == 1 {
            ctx.update(sum);
        } else {
            ctx.update(password);
        }
        sum = ctx.finalize();
    }
    apr1_encode(&sum)
}

/// md5-crypt's encoding of the final digest: bytes taken in its fixed
/// order, three at a time, each 24 bits written as 4 chars, lowest first.
fn apr1_encode(sum: &[u8]) -> [u8; 22] {
    const GROUPS: [(usize, usize, usize); 5] =
        [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)];
    let mut out = [0u8; 22];
    let mut at = 0;
    let mut put = |mut value: u32, chars: usize| {
        for _ in 0..chars {
            out[at] = ITOA64[(value & 0x3f) as usize];
            value >>= 6;
            at += 1;
        }
    };
    for (a, b, c) in GROUPS {
        put(
            (u32::from(sum[a]) << 16) | (u32::from(sum[b]) << 8) | u32::from(sum[c]),
            4,
        );
    }
    put(u32::from(sum[11]), 2);
    out
}

/// Equality whose time depends on the lengths only, not on the contents.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user and password of an `Authorization: Basic <base64>` header
/// value: the scheme in any case, one or more spaces, then standard base64
/// with padding (surrounding spaces and tabs are ignored). The decoded
/// bytes must be UTF-8 and contain ':'; the user is before the first ':',
/// the password the rest. None for anything else: missing, another scheme,
/// bad base64, no colon, a user over 256 bytes, a value over 4096 bytes.
pub fn credentials(authorization: Option<&[u8]>) -> Option<(String, String)> {
    let value = authorization?;
    if value.len() > MAX_HEADER_BYTES {
        return None;
    }
    let value = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim_start_matches(' '))
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    if user.len() > MAX_USER_BYTES {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

/// Basic auth of one method: its htpasswd entries, realm, and the
/// credentials verified before (bounded).
pub struct BasicAuth {
    htpasswd: Htpasswd,
    realm: String,
    ttl: Duration,
    verified: Mutex<HashMap<[u8; 32], Remembered>>,
}

/// Credentials verified before: whose, and until when.
struct Remembered {
    user: String,
    until: Instant,
}

/// Why a request's basic credentials were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BasicError {
    /// No `Authorization` header.
    Missing,
    /// Not `Basic` with base64 of UTF-8 `user:password`, or too long.
    Malformed,
    /// An unknown user or a wrong password (not told apart, on purpose).
    Wrong,
}

impl BasicError {
    /// Every reason, to initialise metric series.
    pub const ALL: [BasicError; 3] = [
        BasicError::Missing,
        BasicError::Malformed,
        BasicError::Wrong,
    ];

    /// A bounded metric label.
    pub fn reason(self) -> &'static str {
        match self {
            BasicError::Missing => "missing",
            BasicError::Malformed => "malformed",
            BasicError::Wrong => "wrong_password",
        }
    }
}

impl BasicAuth {
    /// Basic auth against `htpasswd`, announcing `realm` (which the caller
    /// has checked fits a quoted `WWW-Authenticate` parameter).
    pub fn new(htpasswd: Htpasswd, realm: String) -> Self {
        Self::with_ttl(htpasswd, realm, CACHE_TTL)
    }

    fn with_ttl(htpasswd: Htpasswd, realm: String, ttl: Duration) -> Self {
        BasicAuth {
            htpasswd,
            realm,
            ttl,
            verified: Mutex::new(HashMap::new()),
        }
    }

    /// The realm of `WWW-Authenticate: Basic realm="…"`.
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The user of credentials verified in the last 5 minutes, with no hash
    /// check. Looked up by the SHA-256 digest of the whole header value, so
    /// the cache never holds a password. Failures are never cached.
    pub fn known(&self, authorization: Option<&[u8]>) -> Option<String> {
        let key = cache_key(authorization?)?;
        let now = Instant::now();
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        match verified.get(&key) {
            Some(entry) if entry.until > now => Some(entry.user.clone()),
            Some(_) => {
                verified.remove(&key);
                None
            }
            None => None,
        }
    }

    /// The user name the header claims, read without any hash check:
    /// Missing or Malformed when there is none to check.
    pub fn claimed(&self, authorization: Option<&[u8]>) -> Result<String, BasicError> {
        let value = authorization.ok_or(BasicError::Missing)?;
        let (user, _) = credentials(Some(value)).ok_or(BasicError::Malformed)?;
        Ok(user)
    }

    /// Verifies the header's credentials (slow for bcrypt: the caller runs
    /// it on a blocking thread) and remembers valid ones for `known`.
    /// Ok(user name) or why not.
    pub fn verify(&self, authorization: Option<&[u8]>) -> Result<String, BasicError> {
        let value = authorization.ok_or(BasicError::Missing)?;
        let (user, password) = credentials(Some(value)).ok_or(BasicError::Malformed)?;
        if !self.htpasswd.verify(&user, &password) {
            return Err(BasicError::Wrong);
        }
        self.remember(value, &user, Instant::now());
        Ok(user)
    }

    fn remember(&self, value: &[u8], user: &str, now: Instant) {
        let Some(key) = cache_key(value) else {
            return;
        };
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if verified.len() >= CACHE_ENTRIES && !verified.contains_key(&key) {
            verified.retain(|_, entry| entry.until > now);
            if verified.len() >= CACHE_ENTRIES {
                verified.clear();
            }
        }
        let until = now + self.ttl;
        let user = user.to_string();
        verified.insert(key, Remembered { user, until });
    }
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("htpasswd", &self.htpasswd)
            .field("realm", &self.realm)
            .finish_non_exhaustive()
    }
}

/// The SHA-256 digest of a header value short enough to be read.
fn cache_key(value: &[u8]) -> Option<[u8; 32]> {
    if value.len() > MAX_HEADER_BYTES {
        return None;
    }
    digest::digest(&digest::SHA256, value)
        .as_ref()
        .try_into()
        .ok()
}

#[cfg(test)]
mod tests;
