//! How a build finds what to leave out (SPEC §11): what the reader traces
//! to an object is withheld, what it does not is searched for by
//! bisection, among the objects that changed since the last policy first
//! (those served then built together). A blamed object stays withheld
//! until it, or an object it names, changes: `Memo` remembers it, so no
//! search is repeated. The search is bounded; past its bound the changed
//! objects not yet cleared wait (`retry`) while what built before is
//! served, so one namespace's objects never stop another's changes.
//! What one Ingress names is bounded too (`over_bounds`): watches cost the
//! API server and the gateway.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::{Attempt, Build, Composer};
use crate::build::Checked;
use crate::cluster::gateway::StatusWrite;
use crate::config::Problems;
use crate::import::{self, Object};
use crate::k8s::Kind;

/// At most this many rounds of withholding what the reader refused.
const ROUNDS: usize = 8;
/// At most this many builds spent finding culprits by bisection (about
/// ten per culprit among 1,000 changed objects).
const SEARCH_BUILDS: usize = 64;
/// At most this many Secrets and ConfigMaps one Ingress names (each one
/// watch), and one namespace's Ingresses name together.
pub const NAMED_PER_INGRESS: usize = 16;
pub const NAMED_PER_NAMESPACE: usize = 128;

/// What one build remembers for the next.
#[derive(Default)]
pub struct Memo {
    /// Blamed objects: the fingerprint they were blamed with, and why.
    blamed: HashMap<String, (u64, String)>,
    /// The fingerprints of the objects the last policy served.
    served: HashMap<String, u64>,
}

/// What the search built: the policy, and what it left out.
pub struct Found {
    pub checked: Checked,
    pub report: Vec<import::Line>,
    pub statuses: Vec<StatusWrite>,
    /// `namespace/name` (routes: `Kind namespace/name`) → why.
    pub withheld: BTreeMap<String, String>,
    pub retry: bool,
    pub bindings: Vec<import::Binding>,
}

/// An object's fingerprint with what it names: its spec, labels and
/// annotations (not its status, resource version or managed fields), and
/// the same of each Secret and ConfigMap it names.
fn fingerprint(o: &Object, named: &[&Object]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for o in std::iter::once(o).chain(named.iter().copied()) {
        o.print().hash(&mut h);
    }
    h.finish()
}

/// The Ingresses that name more Secrets and ConfigMaps than their bound,
/// or push their namespace past its (the newest pays), and why.
pub fn over_bounds(
    ours: &[&Object],
    named: impl Fn(&Object) -> BTreeSet<(Kind, String)>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut per_namespace: HashMap<&str, BTreeSet<(Kind, String)>> = HashMap::new();
    for ing in ours.iter().filter(|o| o.is(Kind::Ingress)) {
        let names = named(ing);
        if names.len() > NAMED_PER_INGRESS {
            let why = format!(
                "it names {} Secrets and ConfigMaps; an Ingress may name {NAMED_PER_INGRESS}",
                names.len()
            );
            out.insert(ing.id(), why);
            continue;
        }
        let seen = per_namespace.entry(ing.namespace.as_str()).or_default();
        let new: Vec<_> = names.into_iter().filter(|n| !seen.contains(n)).collect();
        if seen.len() + new.len() > NAMED_PER_NAMESPACE {
            let why = format!(
                "namespace {}'s Ingresses would name more than {NAMED_PER_NAMESPACE} Secrets and ConfigMaps",
                ing.namespace
            );
            out.insert(ing.id(), why);
            continue;
        }
        seen.extend(new);
    }
    out
}

impl Composer {
    /// Builds the base with as many of our objects as build: the policy,
    /// or the base's own problems.
    pub(super) fn search(
        &mut self,
        build: &Build<'_>,
        objects: &[Object],
    ) -> Result<Found, Problems> {
        let by_id: HashMap<(&str, String), &Object> = objects
            .iter()
            .map(|o| ((o.kind.as_str(), o.id()), o))
            .collect();
        let prints: HashMap<String, u64> = build
            .ours
            .iter()
            .map(|o| {
                let named: Vec<&Object> = self
                    .named(o)
                    .iter()
                    .filter_map(|(kind, id)| by_id.get(&(kind.name(), id.clone())).copied())
                    .collect();
                (o.id(), fingerprint(o, &named))
            })
            .collect();
        let bounded = over_bounds(build.ours, |o| self.named(o));
        let mut withheld: BTreeMap<String, String> = self
            .memo
            .blamed
            .iter()
            .filter(|(id, (print, _))| prints.get(*id) == Some(print))
            .map(|(id, (_, why))| (id.clone(), why.clone()))
            .collect();
        withheld.extend(bounded.clone());
        let unchanged = |o: &Object| self.memo.served.get(&o.id()) == prints.get(&o.id());
        let mut budget = SEARCH_BUILDS;
        for _ in 0..ROUNDS {
            let mut served: Vec<&Object> = build
                .ours
                .iter()
                .copied()
                .filter(|o| !withheld.contains_key(&o.id()))
                .collect();
            // What built together before comes first (a stable sort keeps
            // mains before canaries within each part).
            served.sort_by_key(|o| !unchanged(o));
            let known_good = served.iter().filter(|o| unchanged(o)).count();
            let blamed = match self.attempt(build, &served) {
                Attempt::Built(checked, report, statuses, bindings) => {
                    let found = Found {
                        checked: *checked,
                        report,
                        statuses,
                        withheld,
                        retry: false,
                        bindings,
                    };
                    self.remember(&prints, &found.withheld, &bounded, &served);
                    return Ok(found);
                }
                Attempt::Refused(blame) => blame,
                Attempt::Untraced(problems) => {
                    match self.culprit(build, &served, known_good, &mut budget, problems)? {
                        Some(blame) => blame,
                        None => return self.pending(build, &prints, withheld, &bounded),
                    }
                }
            };
            withheld.extend(blamed);
        }
        self.pending(build, &prints, withheld, &bounded)
    }

    /// The search ran out: what changed and is not cleared waits (not
    /// blamed; built again soon), and what built before is served.
    fn pending(
        &mut self,
        build: &Build<'_>,
        prints: &HashMap<String, u64>,
        mut withheld: BTreeMap<String, String>,
        bounded: &BTreeMap<String, String>,
    ) -> Result<Found, Problems> {
        let blamed = withheld.clone();
        let waiting: Vec<String> = build
            .ours
            .iter()
            .copied()
            .filter(|o| !withheld.contains_key(&o.id()))
            .filter(|o| self.memo.served.get(&o.id()) != prints.get(&o.id()))
            .map(Object::id)
            .collect();
        for id in waiting {
            let why = "waiting: the policy did not build with this cluster's changes, and the \
                       search for their culprit goes on in the next build";
            withheld.insert(id, why.into());
        }
        let served: Vec<&Object> = build
            .ours
            .iter()
            .copied()
            .filter(|o| !withheld.contains_key(&o.id()))
            .collect();
        match self.attempt(build, &served) {
            Attempt::Built(checked, report, statuses, bindings) => {
                self.remember(prints, &blamed, bounded, &served);
                Ok(Found {
                    checked: *checked,
                    report,
                    statuses,
                    withheld,
                    retry: true,
                    bindings,
                })
            }
            Attempt::Refused(_) | Attempt::Untraced(_) => {
                let mut p = Problems::new(self.base.display().to_string());
                p.push(
                    (1, 1),
                    "kubernetes.unbuildable",
                    "the cluster's objects do not build, not even those served before; the last policy stays",
                );
                Err(p)
            }
        }
    }

    /// Remembers the blamed objects (not those over a bound, which are
    /// counted again each build) and the fingerprints of those served.
    fn remember(
        &mut self,
        prints: &HashMap<String, u64>,
        withheld: &BTreeMap<String, String>,
        bounded: &BTreeMap<String, String>,
        served: &[&Object],
    ) {
        self.memo.blamed = withheld
            .iter()
            .filter(|(id, _)| !bounded.contains_key(*id))
            .filter_map(|(id, why)| Some((id.clone(), (*prints.get(id)?, why.clone()))))
            .collect();
        self.memo.served = served
            .iter()
            .filter_map(|o| Some((o.id(), *prints.get(&o.id())?)))
            .collect();
    }

    /// The object whose arrival breaks the build, for a problem the
    /// reader's places do not trace (a certificate, text that does not
    /// parse, a canary's route): the shortest failing prefix of `served`
    /// (what built before first, then mains before canaries, so a canary
    /// is blamed, not its main), found by bisection, ends with it. When the
    /// base and the Gateway's listeners fail without any of them, theirs
    /// are the problems (`Err`); `None` when the search has spent its
    /// builds.
    fn culprit(
        &self,
        build: &Build<'_>,
        served: &[&Object],
        known_good: usize,
        budget: &mut usize,
        problems: Problems,
    ) -> Result<Option<BTreeMap<String, String>>, Problems> {
        match self.attempt(build, &[]) {
            Attempt::Built(..) => {}
            Attempt::Untraced(own) => return Err(own),
            Attempt::Refused(_) => return Err(problems),
        }
        Ok(self.bisect(build, served, known_good, budget))
    }

    /// `culprit`'s search, the empty prefix known to build; the first
    /// `known_good` built together before, and are tried first.
    fn bisect(
        &self,
        build: &Build<'_>,
        served: &[&Object],
        known_good: usize,
        budget: &mut usize,
    ) -> Option<BTreeMap<String, String>> {
        let (mut good, mut bad) = (0, served.len());
        let mut why = None;
        let mut first = (known_good > 0 && known_good < served.len()).then_some(known_good);
        while bad - good > 1 {
            *budget = budget.checked_sub(1)?;
            let mid = first.take().unwrap_or((good + bad) / 2);
            match self.attempt(build, &served[..mid]) {
                Attempt::Built(..) => good = mid,
                Attempt::Refused(blame) => return Some(blame),
                Attempt::Untraced(problems) => {
                    why = problems
                        .errors()
                        .next()
                        .map(|p| format!("{}: {}", p.code, p.message));
                    bad = mid;
                }
            }
        }
        let culprit = served.get(good)?;
        let why = why.unwrap_or_else(|| "the policy does not build with it".into());
        Some(BTreeMap::from([(culprit.id(), why)]))
    }
}
