//! The configuration reference documents every key the parser accepts, and
//! nothing else: the first cells of the table rows in `docs/configuration.md`
//! (`` | `server.listen` | ... ``) must be exactly the paths of
//! `schema::paths()`, each documented once.

use std::collections::BTreeSet;
use std::path::Path;

use fairgate::config::schema;

const REFERENCE: &str = "docs/configuration.md";

fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(REFERENCE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The backticked key in the first cell of every table row that starts with
/// one, in document order.
fn documented_paths(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with("| `"))
        .map(|(index, line)| {
            let cell = line
                .split('|')
                .nth(1)
                .expect("a table row starts with |")
                .trim();
            cell.strip_prefix('`')
                .and_then(|c| c.strip_suffix('`'))
                .filter(|c| !c.is_empty() && !c.contains('`'))
                .unwrap_or_else(|| {
                    panic!(
                        "{REFERENCE}:{}: the first cell must be one backticked key, not {cell:?}",
                        index + 1
                    )
                })
                .to_string()
        })
        .collect()
}

#[test]
fn reference_documents_every_key_and_no_other() {
    let documented: BTreeSet<String> = documented_paths(&reference()).into_iter().collect();
    let accepted: BTreeSet<String> = schema::paths().into_iter().collect();
    let missing: Vec<&String> = accepted.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{REFERENCE} and schema::paths() differ\n\
         accepted by the parser but not documented: {missing:#?}\n\
         documented but not accepted by the parser: {extra:#?}"
    );
}

#[test]
fn reference_documents_each_key_once() {
    let documented = documented_paths(&reference());
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<&str> = documented
        .iter()
        .map(String::as_str)
        .filter(|path| !seen.insert(*path))
        .collect();
    assert!(
        repeated.is_empty(),
        "{REFERENCE} documents these keys more than once: {repeated:#?}"
    );
}

/// docs/migrating-from-ingress-nginx.md has a table row for exactly the
/// annotations `fairgate import ingress-nginx` maps or approximates.
#[test]
fn the_migration_guide_documents_every_imported_annotation() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/migrating-from-ingress-nginx.md");
    let text = std::fs::read_to_string(&path).expect("docs/migrating-from-ingress-nginx.md");
    let rows: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_string()))
        .filter(|name| !name.contains('.') && !name.contains(' '))
        .collect();
    let known: BTreeSet<String> = fairgate::import::KNOWN
        .iter()
        .map(|s| s.to_string())
        .collect();
    let missing: Vec<&String> = known.difference(&rows).collect();
    assert!(missing.is_empty(), "annotations without a row: {missing:?}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(readme.contains("fairgate import ingress-nginx"));
    assert!(readme.contains("docs/migrating-from-ingress-nginx.md"));
}
