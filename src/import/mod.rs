//! `fairgate import ingress-nginx`: Kubernetes Ingress objects annotated
//! for ingress-nginx in, a fairgate policy and a report out. The report has
//! one line per annotation (and per controller ConfigMap key) of every
//! Ingress: `mapped`, `approximated (why)` or `not supported (why)`; nothing
//! is guessed. docs/migrating-from-ingress-nginx.md is the mapping table.
//!
//! `manifests` reads the inputs. `policy` drives the run over a
//! `draft::Draft` (what is built so far): `configmap` and `controller`
//! first, `tls` sections, then each main Ingress's `annotations::plan`
//! (its families: `limits`, `cors`, `retries`, `timeouts`, `proxy_ssl`,
//! `auth` methods, `headers`, `nginx` snippets, `streaming`), its `backend` pools and its
//! `paths` as `routes`, then `canary` Ingresses. What they build is the
//! typed policy of `out` (every key named once, checked against
//! config/schema.rs), which `emit` writes as YAML. `plan`, `routes`,
//! `backend`, `out`, `units` and `names` sit below them all.
//! `report` holds what they all speak (`Options`, `Verdict`, `Line`,
//! `Imported`); no file of the import uses one that uses it.

mod affinity;
mod annotations;
mod auth;
mod backend;
mod canary;
mod claims;
mod client_tls;
mod compression;
mod configmap;
mod controller;
mod cors;
mod draft;
mod emit;
mod endpoints;
mod fairgate;
mod gateway_api;
mod headers;
mod limits;
// Public only for the fuzz target.
#[doc(hidden)]
pub mod manifests;
mod mirror;
mod names;
mod nginx;
mod notes;
mod out;
mod passthrough;
mod paths;
mod plan;
mod policy;
mod proxy_ssl;
mod report;
mod retries;
mod routes;
mod servers;
mod streaming;
mod tcp_services;
mod timeouts;
mod tls;
mod units;

use std::path::PathBuf;

pub use annotations::KNOWN;
pub use claims::age;

pub use emit::{json_node, shown, yaml, Node};
pub use endpoints::{targets as service_targets, Binding, Guard, NoTargets, Services};
pub use manifests::Object;
pub use names::{policy_name, route_prefix};
pub use paths::rule_hosts;
pub use report::{Imported, Line, Options, Refusal, Sources, Target, Verdict};
pub use tls::{secret_pem, secret_problem};

/// Converts the objects read from the inputs.
pub fn convert(objects: &[Object], options: &Options) -> Imported {
    convert_refs(&objects.iter().collect::<Vec<_>>(), options)
}

/// `convert`, of objects held elsewhere (the controller's, not copied).
pub fn convert_refs(objects: &[&Object], options: &Options) -> Imported {
    policy::run(draft::Draft::new(objects, options))
}

/// Why the command stopped before its outputs were written.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Read(#[from] manifests::ReadError),
    /// `--output` or `--report`.
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Standard output or standard error.
    #[error(transparent)]
    Stream(std::io::Error),
}

/// Runs the command: 0 when every annotation was mapped or approximated,
/// 2 when some are not supported (the policy is written either way), 1 when
/// the inputs cannot be read or the outputs written.
pub fn main(options: &Options) -> i32 {
    match run(options) {
        Ok(0) => 0,
        Ok(_) => 2,
        Err(e) => {
            eprintln!("import: {e}");
            1
        }
    }
}

/// Reads, converts and writes; how many report lines are `not supported`.
fn run(options: &Options) -> Result<usize, Error> {
    let objects = manifests::read(&options.inputs)?;
    let mut imported = convert(&objects, options);
    let mut policy = imported.text();
    if options.to == Target::GatewayApi {
        let converted = gateway_api::convert(&objects, options, &policy);
        imported.report.extend(converted.report);
        for (k, base) in converted.bases.iter().enumerate() {
            let path = options.base.as_ref().map(|p| numbered(p, k + 1));
            write(path.as_ref(), base, false)?;
        }
        policy = converted.manifests;
    }
    let mut report: String = imported.report.iter().map(|l| format!("{l}\n")).collect();
    let unsupported = imported.unsupported();
    report.push_str(&format!(
        "{} lines: {} not supported\n",
        imported.report.len(),
        unsupported
    ));
    write(options.output.as_ref(), &policy, false)?;
    write(options.report.as_ref(), &report, true)?;
    Ok(unsupported)
}

/// The `n`th of several files written where `path` says: `path` itself,
/// then `base-2.yaml` beside `base.yaml`, ...
fn numbered(path: &std::path::Path, n: usize) -> PathBuf {
    if n == 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    path.with_file_name(name)
}

fn write(path: Option<&PathBuf>, text: &str, stderr: bool) -> Result<(), Error> {
    use std::io::Write;
    match path {
        Some(p) => std::fs::write(p, text).map_err(|source| Error::Write {
            path: p.clone(),
            source,
        }),
        None if stderr => std::io::stderr()
            .write_all(text.as_bytes())
            .map_err(Error::Stream),
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(Error::Stream),
    }
}
