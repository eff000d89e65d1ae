//! nginx's units as ingress-nginx's annotations and ConfigMap keys write
//! them, read as fairgate writes them: sizes (`8m`), seconds (`60`,
//! `60s`), durations, Go's booleans, comma lists and address lists. Text
//! to text: nothing here knows which annotation it reads.

/// nginx sizes (`8m`, `512k`, `1g`, bytes): Some(None) for `0`, no limit.
pub fn nginx_size(text: &str) -> Option<Option<String>> {
    let text = text.trim();
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = digits.parse().ok()?;
    if n == 0 {
        return Some(None);
    }
    let unit = match unit {
        "" => "",
        "k" | "K" => "KiB",
        "m" | "M" => "MiB",
        "g" | "G" => "GiB",
        _ => return None,
    };
    Some(Some(format!("{n}{unit}")))
}

/// Seconds as ingress-nginx's timeouts give them: `60`, or `60s`.
pub fn seconds(text: &str) -> Option<String> {
    let n: u64 = text
        .trim()
        .trim_end_matches('s')
        .parse()
        .ok()
        .filter(|n| *n > 0)?;
    Some(format!("{n}s"))
}

pub fn duration(s: u64) -> String {
    match s {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Why an address list does not carry over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not a CIDR or address")]
    NotAnAddress(String),
    #[error("{0:?} names no address")]
    Empty(String),
}

/// A comma-separated list of CIDRs or addresses.
pub fn cidrs(text: &str) -> Result<Vec<String>, CidrError> {
    let list: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let ok = s.parse::<ipnet::IpNet>().is_ok() || s.parse::<std::net::IpAddr>().is_ok();
            ok.then(|| s.to_string())
                .ok_or_else(|| CidrError::NotAnAddress(s.to_string()))
        })
        .collect::<Result<_, _>>()?;
    // An empty list means "every address" to fairgate: never from a rule
    // that meant to restrict.
    if list.is_empty() {
        return Err(CidrError::Empty(text.to_string()));
    }
    Ok(list)
}

/// A boolean annotation as ingress-nginx reads it (Go's `ParseBool`).
pub fn go_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// `a, b,c` as [a, b, c].
pub fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_units() {
        assert_eq!(nginx_size("8m"), Some(Some("8MiB".into())));
        assert_eq!(nginx_size("0"), Some(None));
        assert_eq!(nginx_size("1x"), None);
        assert_eq!(seconds("120"), Some("120s".into()));
        assert_eq!(duration(1_728_000), "20d");
        assert!(cidrs("10.0.0.0/8, 192.168.1.1").is_ok());
        assert_eq!(
            cidrs("10.0.0.0/8, nope").unwrap_err().to_string(),
            "\"nope\" is not a CIDR or address"
        );
        assert_eq!(
            cidrs(" , ").unwrap_err().to_string(),
            "\" , \" names no address"
        );
    }
}
