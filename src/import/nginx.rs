//! nginx configuration as a `configuration-snippet` holds it: statements
//! split on `;` outside quotes, their words, and the nginx variables
//! fairgate's templates know. It reads text; what a statement becomes is
//! decided by its caller.

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

/// nginx variables fairgate templates know: `$host`, `$remote_addr`,
/// `$request_id`, `$uri`.
pub fn variables(value: &str) -> Result<String, String> {
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
            other => {
                return Err(format!(
                    "nginx variable ${other} has no fairgate equivalent"
                ))
            }
        };
        out.push_str(var);
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}
