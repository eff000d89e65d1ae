use super::*;

#[test]
fn a_route_belongs_to_the_ingress_of_the_longest_prefix() {
    let owners = BTreeMap::from([
        ("shop_a".to_string(), ("shop".to_string(), "a".to_string())),
        (
            "shop_a-1".to_string(),
            ("shop".to_string(), "a-1".to_string()),
        ),
    ]);
    assert_eq!(owner(&owners, "shop_a-1-0"), Some(("shop", "a-1", "0")));
    assert_eq!(owner(&owners, "shop_a-1"), Some(("shop", "a", "1")));
    assert_eq!(
        owner(&owners, "shop_a-0-canary"),
        Some(("shop", "a", "0-canary"))
    );
    assert_eq!(owner(&owners, "shop_b-0"), None);
}
