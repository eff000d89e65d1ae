//! Label and field selectors, as list and watch requests carry them
//! (`labelSelector=app=web,tier!=db,canary`, `fieldSelector=metadata.name=x`).
//! Parses and matches; knows nothing of the store.

use serde_json::Value;

#[derive(Debug, Clone)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// Both selectors of one request; an empty one matches everything.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    labels: Vec<Term>,
    /// Field terms: a dotted path into the object (`metadata.name`,
    /// `metadata.namespace`, `type` of a Secret, `status.phase`…).
    fields: Vec<Term>,
}

/// Splits on commas outside parentheses (`env in (a,b),tier`).
fn split_terms(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(text[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn set_term(term: &str, word: &str) -> Option<(String, Vec<String>)> {
    let (key, rest) = term.split_once(word)?;
    let rest = rest.trim();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    let values = inner.split(',').map(|v| v.trim().to_string()).collect();
    Some((key.trim().to_string(), values))
}

fn parse_term(term: &str) -> Result<Term, String> {
    let pair = |k: &str, v: &str| (k.trim().to_string(), v.trim().to_string());
    if let Some((k, v)) = term.split_once("!=") {
        let (k, v) = pair(k, v);
        return Ok(Term::NotEquals(k, v));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        let (k, v) = pair(k, v);
        return Ok(Term::Equals(k, v));
    }
    if let Some((k, vs)) = set_term(term, " notin ") {
        return Ok(Term::NotIn(k, vs));
    }
    if let Some((k, vs)) = set_term(term, " in ") {
        return Ok(Term::In(k, vs));
    }
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Term::Absent(k.trim().to_string()));
    }
    if term.contains(|c: char| c.is_whitespace() || "()".contains(c)) {
        return Err(format!("unable to parse requirement: {term:?}"));
    }
    Ok(Term::Exists(term.to_string()))
}

impl Selectors {
    /// Parses both; the error is the message of a 400 BadRequest.
    pub fn parse(labels: &str, fields: &str) -> Result<Selectors, String> {
        let labels = split_terms(labels)
            .into_iter()
            .map(parse_term)
            .collect::<Result<_, _>>()?;
        let fields: Vec<Term> = split_terms(fields)
            .into_iter()
            .map(parse_term)
            .collect::<Result<_, _>>()?;
        if fields
            .iter()
            .any(|t| !matches!(t, Term::Equals(..) | Term::NotEquals(..)))
        {
            return Err(format!("invalid field selector: {fields:?}"));
        }
        Ok(Selectors { labels, fields })
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str).map(str::to_string);
        let field = |k: &str| field_value(object, k);
        self.labels.iter().all(|t| holds(t, label)) && self.fields.iter().all(|t| holds(t, field))
    }
}

/// The value at a dotted path, as a field selector compares it ("" when
/// absent, as the API server's field sets have it).
fn field_value(object: &Value, path: &str) -> Option<String> {
    let mut at = object;
    for part in path.split('.') {
        at = at.get(part)?;
    }
    Some(match at {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

fn holds(term: &Term, value: impl Fn(&str) -> Option<String>) -> bool {
    match term {
        Term::Equals(k, v) => value(k).unwrap_or_default() == *v,
        Term::NotEquals(k, v) => value(k).unwrap_or_default() != *v,
        Term::In(k, vs) => value(k).is_some_and(|x| vs.contains(&x)),
        Term::NotIn(k, vs) => value(k).is_none_or(|x| !vs.contains(&x)),
        Term::Exists(k) => value(k).is_some(),
        Term::Absent(k) => value(k).is_none(),
    }
}
