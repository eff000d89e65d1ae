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

/// `fairgate import --to gateway-api`: a pool's `fair_share` travels in
/// the route's RoutePolicy, in the CRD's spelling, and reads back as the
/// same settings; a canary's pool with one is refused, never dropped.
#[test]
fn a_pools_fair_share_travels_in_the_route_policy() {
    let fair = json!({"max_in_flight": 16, "by": {"header": "X-Team"},
                      "queue": {"per_tenant": 8, "timeout": "2s"}, "weights": {"gold": 4}});
    let pool = json!({"connect_timeout": "5s", "fair_share": fair});
    let mut policy = Map::new();
    filters::pool_keys(&pool, &mut policy);
    let want = json!({"timeouts": {"connect": "5s"}, "fairShare": {"maxInFlight": 16,
        "byHeader": "X-Team", "perTenant": 8, "timeout": "2s", "weights": {"gold": 4}}});
    assert_eq!(Value::Object(policy.clone()), want);
    let spec: crate::k8s::route_policy::RoutePolicySpec =
        serde_json::from_value(Value::Object(policy)).unwrap();
    let back = spec.fair_share().unwrap();
    let as_policy = crate::import::json_node(&fair);
    let sorted = |n: &crate::import::Node| {
        let crate::import::Node::Map(mut fields) = n.clone() else {
            panic!("{n:?}")
        };
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        fields
    };
    assert_eq!(sorted(&back), sorted(&as_policy));
    assert!(filters::one_queue(&pool, "a canary").is_err());
    assert!(filters::one_queue(&json!({"targets": []}), "a canary").is_ok());
}
