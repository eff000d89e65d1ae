//! Host names as fairgate compares them: lower case, without the one
//! trailing dot of a fully qualified name. The one normaliser, shared by
//! the config reader (route hosts, a certificate's `hosts:`), the request's
//! Host header (`proxy::target`) and TLS (SNI, certificate names). A leaf:
//! it imports nothing from the crate.

/// Lower case, without the trailing dot of a fully qualified name (`.`
/// alone stays): how names are compared.
pub fn normal_name(name: &str) -> String {
    let name = match name.strip_suffix('.') {
        Some(n) if !n.is_empty() => n,
        _ => name,
    };
    name.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_compare_lower_case_without_the_root_dot() {
        assert_eq!(super::normal_name("API.Example.com."), "api.example.com");
        assert_eq!(super::normal_name("*.example.com"), "*.example.com");
        assert_eq!(super::normal_name("."), ".");
    }
}
