//! Headless Chromium, as a real browser user acts: a fresh profile (no
//! cookies) per run, test host names resolved to loopback.

/// The DOM headless Chromium ends on after loading `url` with a fresh
/// profile, each of `hosts` resolved to 127.0.0.1.
pub fn browse(url: &str, hosts: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let rules: Vec<String> = hosts.iter().map(|h| format!("MAP {h} 127.0.0.1")).collect();
    let out = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
            &format!("--host-resolver-rules={}", rules.join(", ")),
            &format!("--user-data-dir={}", profile.path().display()),
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ])
        .output()
        .expect("headless Chromium is needed: apt-get install chromium (scripts/deps does)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the page at `url` wrote into `<body data-result=...>`.
pub fn page_result(url: &str, hosts: &[&str]) -> String {
    let dom = browse(url, hosts);
    dom.split("data-result=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no result in the page: {dom}"))
        .to_string()
}
