//! `keys!`, the one way a mapping's keys are named: `out.rs` and its
//! children declare their mappings with it.

/// A mapping's keys: an enum whose variants are written as the given
/// text, and (for the schema test) every key and the dotted paths of
/// `config::schema::paths()` they sit under.
macro_rules! keys {
    ($(#[$doc:meta])* $name:ident at [$($path:literal),+] { $($variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl Key for $name {
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        #[cfg(test)]
        impl $name {
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant),+];
            pub(crate) const AT: &'static [&'static str] = &[$($path),+];
        }
    };
}
