//! `proxy-connect-timeout`, `proxy-read-timeout` and `proxy-send-timeout`:
//! the route's `timeouts`; without the annotation, the controller
//! ConfigMap's read and send timeouts (its connect timeout is every pool's).

use std::collections::BTreeMap;

use super::draft::Draft;
use super::emit::Key;
use super::out::{TimeoutKey, Timeouts};
use super::plan::Plan;
use super::units::seconds;
use super::Verdict;

/// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
pub fn read(
    draft: &Draft<'_>,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let mut node = Timeouts::default();
    for (i, (key, target)) in [
        ("proxy-connect-timeout", TimeoutKey::Connect),
        ("proxy-read-timeout", TimeoutKey::Read),
        ("proxy-send-timeout", TimeoutKey::Write),
    ]
    .into_iter()
    .enumerate()
    {
        let value = match ann.get(key) {
            Some(v) => match seconds(v) {
                Some(d) => {
                    lines.push((
                        key.into(),
                        Verdict::Mapped(format!("timeouts.{}", target.as_str())),
                    ));
                    Some(d)
                }
                None => {
                    lines.push((
                        key.into(),
                        Verdict::Unsupported(format!("{v:?} is not a number of seconds")),
                    ));
                    None
                }
            },
            // The ConfigMap's connect timeout is every pool's connect_timeout.
            None if i == 0 => None,
            None => draft.globals.timeouts[i].clone(),
        };
        *match target {
            TimeoutKey::Connect => &mut node.connect,
            TimeoutKey::Read => &mut node.read,
            TimeoutKey::Write => &mut node.write,
        } = value;
    }
    if !node.is_empty() {
        plan.keys.timeouts = Some(node);
    }
}
