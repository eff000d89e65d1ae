//! How a build finds what to leave out (SPEC §11): each problem the
//! reader finds in the cluster's part is traced from its entry's origin
//! to the objects that made the entry, which are withheld, and the build
//! runs again without them (at most `ROUNDS` times). A withheld object
//! stays withheld until it, or an object it names, changes: `Memo`
//! remembers it, so its build is not repeated. A problem no origin names
//! is the base's (or a Gateway listener's) when they fail alone. Past the
//! rounds, or for a problem no origin names, what changed since the last
//! policy waits (`retry`) while what built before is served, withholding
//! what fails there the same way. No search guesses a culprit. What one
//! Ingress names
//! is bounded too (`over_bounds`): watches cost the API server and the
//! gateway.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::{Attempt, Build, Composer};
use crate::build::Checked;
use crate::cluster::gateway::StatusWrite;
use crate::config::Problems;
use crate::import::{self, Object};
use crate::k8s::Kind;

/// At most this many rounds of withholding what the reader refused (then
/// `pending`'s, one more at most for each object that built before).
const ROUNDS: usize = 8;
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

/// Our objects but those withheld.
fn not_withheld<'o>(build: &Build<'o>, withheld: &BTreeMap<String, String>) -> Vec<&'o Object> {
    let ours = build.ours.iter().copied();
    ours.filter(|o| !withheld.contains_key(&o.id())).collect()
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
        for _ in 0..ROUNDS {
            let served = not_withheld(build, &withheld);
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
                    self.untraced(build, problems)?;
                    return self.pending(build, &prints, withheld, &bounded);
                }
            };
            withheld.extend(blamed);
        }
        self.pending(build, &prints, withheld, &bounded)
    }

    /// The rounds ran out, or a problem named no object: what changed and
    /// is not cleared waits (not blamed; built again soon), and what built
    /// before is served.
    fn pending(
        &mut self,
        build: &Build<'_>,
        prints: &HashMap<String, u64>,
        mut withheld: BTreeMap<String, String>,
        bounded: &BTreeMap<String, String>,
    ) -> Result<Found, Problems> {
        let mut blamed = withheld.clone();
        let waiting: Vec<String> = build
            .ours
            .iter()
            .copied()
            .filter(|o| !withheld.contains_key(&o.id()))
            .filter(|o| self.memo.served.get(&o.id()) != prints.get(&o.id()))
            .map(Object::id)
            .collect();
        for id in waiting {
            let why = "waiting: the policy did not build with this cluster's changes; they are \
                       built again soon";
            withheld.insert(id, why.into());
        }
        // What built before may fail now, where a withheld or waiting
        // object's host or certificate passes to the next in line: what is
        // traced is withheld and remembered as in `search` (each object's
        // own section fails; not remembering it would cost a chain of k
        // Ingresses k rounds in every build until the last is withheld),
        // round after round while each withholds more, so at most once
        // each object served.
        loop {
            let served = not_withheld(build, &withheld);
            match self.attempt(build, &served) {
                Attempt::Built(checked, report, statuses, bindings) => {
                    self.remember(prints, &blamed, bounded, &served);
                    return Ok(Found {
                        checked: *checked,
                        report,
                        statuses,
                        withheld,
                        retry: true,
                        bindings,
                    });
                }
                Attempt::Refused(blame) => {
                    blamed.extend(blame.clone());
                    withheld.extend(blame);
                }
                Attempt::Untraced(_) => break,
            }
        }
        let mut p = Problems::new(self.base.display().to_string());
        p.push(
            (1, 1),
            "kubernetes.unbuildable",
            "the cluster's objects do not build, not even those served before; the last policy stays",
        );
        Err(p)
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

    /// For problems no object's origin names: the base's and the
    /// Gateway's listeners' own when they fail without any of our
    /// objects (`Err`); else what changed waits (`pending`).
    /// The reader traces every problem of the cluster's part to its
    /// entry, so the latter is a defect, logged as one: no search is run
    /// to guess a culprit.
    fn untraced(&self, build: &Build<'_>, problems: Problems) -> Result<(), Problems> {
        match self.attempt(build, &[]) {
            Attempt::Built(..) => {
                let first = problems.errors().next();
                let code = first.map_or("", |p| p.code);
                tracing::error!(
                    code,
                    "a problem of the cluster's objects names no object (a defect: please report \
                     it); what changed waits, and what built before is served"
                );
                Ok(())
            }
            Attempt::Untraced(own) => Err(own),
            Attempt::Refused(_) => Err(problems),
        }
    }
}
