use super::*;

#[test]
fn each_entry_is_on_a_line_of_its_own_and_names_its_field() {
    let tree = Node::map([
        (
            "auth",
            Node::map([(
                "methods",
                Node::map([("apps_private-auth", Node::map([("basic", Node::str("x"))]))]),
            )]),
        ),
        (
            "upstreams",
            Node::map([("apps_web-80", Node::map([("targets", Node::strs(["a:1"]))]))]),
        ),
        (
            "routes",
            Node::Seq(vec![Node::map([
                ("name", Node::str("apps_private-0")),
                ("auth", Node::str("apps_private-auth")),
            ])]),
        ),
    ]);
    let mut origins = Origins::new(10);
    let located = origins.locate(&tree);
    let at = |line| origins.at(line).map(|e| (e.section, e.name.as_str()));
    assert_eq!(at(9), None);
    assert_eq!(at(10), Some(("auth", "apps_private-auth")));
    assert_eq!(at(11), Some(("upstreams", "apps_web-80")));
    assert_eq!(at(12), Some(("routes", "apps_private-0")));
    assert_eq!(at(13), None);
    let route = &located
        .as_mapping()
        .unwrap()
        .get_sequence("routes")
        .unwrap()[0];
    assert_eq!(super::super::super::config::yaml::position(route), (12, 1));
    let entry = origins.at(12).unwrap();
    assert!(mentions(entry.node, "apps_private-auth"));
    assert_eq!(
        named_field("routes[3].timeout \"x\": not a duration", entry),
        "route apps_private-0.timeout \"x\": not a duration"
    );
    assert_eq!(
        without_place(
            "server.tls.certificates[1]: hosts: a.example is not a name of \
             server.tls.certificates[1].cert_pem (its names: localhost)"
        ),
        "hosts: a.example is not a name of its certificate (its names: localhost)"
    );
}

#[test]
fn a_certificate_is_blamed_on_the_ingresses_naming_its_secret_only() {
    let ingress = |ns: &str, created: &str| Object {
        kind: Kind::Ingress.name().into(),
        namespace: ns.into(),
        name: "web".into(),
        value: std::sync::Arc::new(serde_json::json!({
            "metadata": {"creationTimestamp": created},
            "spec": {"tls": [{"hosts": ["A.example"], "secretName": "tls"}]}
        })),
    };
    let (shop, evil) = (
        ingress("shop", "2026-01-01T00:00:00Z"),
        ingress("evil", "2026-06-01T00:00:00Z"),
    );
    // A certificate without `hosts:` (its own names decide), as an
    // Ingress's TLS section without hosts gives.
    let cert = Node::map([("cert_pem", Node::str("x"))]);
    let tree = Node::map([(
        "server",
        Node::map([("tls", Node::map([("certificates", Node::Seq(vec![cert]))]))]),
    )]);
    let mut origins = Origins::new(10);
    origins.locate(&tree);
    let mut problems = Problems::new("base.yaml");
    let message = "server.tls.certificates[1]: a.example is claimed by \
                   server.tls.certificates[1].cert_pem and by base.pem";
    problems.push((10, 1), "server.tls_duplicate_name", message);
    for secret in ["shop/tls", "evil/tls"] {
        for served in [[&shop, &evil], [&evil, &shop]] {
            let sources = import::Sources {
                certificates: vec![secret.to_string()],
                ..Default::default()
            };
            let blamed = origins.owners(&problems, &served, &sources);
            let owner = format!("{}/web", secret.split('/').next().unwrap());
            let why = format!(
                "server.tls_duplicate_name: TLS Secret {secret}: a.example is claimed by \
                 its certificate and by base.pem"
            );
            assert_eq!(blamed, BTreeMap::from([(owner, why)]));
        }
    }
    // A problem of the base's lines is no object's.
    let mut base = Problems::new("base.yaml");
    base.push((3, 1), "server.tls_duplicate_name", message);
    assert!(origins
        .owners(&base, &[&shop], &import::Sources::default())
        .is_empty());
}

#[test]
fn a_canarys_route_key_and_pool_are_blamed_on_the_canary() {
    let ingress = |name: &str| Object {
        kind: Kind::Ingress.name().into(),
        namespace: "shop".into(),
        name: name.into(),
        value: std::sync::Arc::new(serde_json::json!({})),
    };
    let (main, canary) = (ingress("web"), ingress("canary"));
    let pool = || Node::map([("targets", Node::strs(["a:1"]))]);
    let main_route = Node::map([
        ("name", Node::str("shop_web-0")),
        ("upstream", Node::str("shop_web-80")),
        (
            "canary",
            Node::map([("upstream", Node::str("shop_beta-80"))]),
        ),
    ]);
    // The header route: a copy of the main's, its pool the canary's.
    let header_route = Node::map([
        ("name", Node::str("shop_web-0-canary")),
        ("upstream", Node::str("shop_beta-80")),
        ("timeout", Node::str("x")),
    ]);
    let tree = Node::map([
        (
            "upstreams",
            Node::map([("shop_beta-80", pool()), ("shop_web-80", pool())]),
        ),
        ("routes", Node::Seq(vec![main_route, header_route])),
        // No route uses it (its Ingress's paths were refused).
        ("limits", Node::map([("shop_canary-rps", pool())])),
    ]);
    let mut origins = Origins::new(10);
    origins.locate(&tree);
    let at = |line| origins.at(line).map(|e| e.name.as_str());
    assert_eq!(
        [at(10), at(12), at(13)],
        [
            Some("shop_beta-80"),
            Some("shop_web-0"),
            Some("shop_web-0-canary")
        ]
    );
    // The header route is the main's copy: the import records it as
    // the main Ingress's.
    let sources = import::Sources {
        canaries: BTreeMap::from([("shop_web-0".into(), "shop/canary".into())]),
        routes: vec!["shop/web".into(), "shop/web".into()],
        made: BTreeMap::from([(("limits", "shop_canary-rps".into()), "shop/canary".into())]),
        ..Default::default()
    };
    let served = [&main, &canary];
    let blamed = |line: usize, message: &str| {
        let mut problems = Problems::new("base.yaml");
        problems.push((line, 1), "routes.invalid", message);
        let owners = origins.owners(&problems, &served, &sources);
        owners.into_keys().collect::<Vec<_>>()
    };
    assert_eq!(blamed(13, "routes[1].match.headers: x"), ["shop/canary"]);
    assert_eq!(blamed(13, "routes[1].upstream: x"), ["shop/canary"]);
    assert_eq!(blamed(13, "routes[1].timeout \"x\": x"), ["shop/web"]);
    assert_eq!(blamed(12, "routes[0].canary.cookie: x"), ["shop/canary"]);
    assert_eq!(blamed(12, "routes[0].upstream: x"), ["shop/web"]);
    assert_eq!(
        blamed(10, "upstreams.shop_beta-80.targets: x"),
        ["shop/canary"]
    );
    assert_eq!(blamed(11, "upstreams.shop_web-80.targets: x"), ["shop/web"]);
    assert_eq!(
        blamed(14, "limits.shop_canary-rps.rate: x"),
        ["shop/canary"]
    );
    // A canary not served (withheld) is no one to blame: untraced.
    let owners = |problems: &Problems| origins.owners(problems, &[&main], &sources);
    let mut problems = Problems::new("base.yaml");
    problems.push((13, 1), "routes.invalid", "routes[1].match.headers: x");
    assert!(owners(&problems).is_empty());
}
