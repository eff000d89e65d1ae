//! Watch streams: a chunked `application/json` answer, one event a line
//! (`{"type":"ADDED","object":{…}}`). From resourceVersion "" or "0" the
//! current objects come first as ADDED; from a given one the history after
//! it is replayed, or, if it was compacted away, one ERROR event with a 410
//! `Expired` Status ends the stream (as the real server answers). Then it
//! follows the store's writes, sends BOOKMARKs when asked, and ends
//! cleanly at `timeoutSeconds`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::time::{sleep_until, Instant};

use super::http::{parse_rv, selectors, ApiRequest, Reply, Target};
use super::resources::Resource;
use super::select::Selectors;
use super::store::{ApiError, Event};
use super::Shared;

/// The server's own end of a watch that asked for none (the real one
/// picks 30 to 60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Watch {
    shared: Arc<Shared>,
    resource: &'static Resource,
    ns: String,
    selectors: Selectors,
    /// Every change up to here has been queued.
    sent: u64,
    queue: VecDeque<Value>,
    changed: tokio::sync::watch::Receiver<u64>,
    deadline: Instant,
    /// When the next BOOKMARK is due, if they were asked for.
    bookmark: Option<Instant>,
    done: bool,
    /// Objects as `PartialObjectMetadata` (the client asked so).
    metadata_only: bool,
}

fn event(kind: &str, object: &Value) -> Value {
    json!({ "type": kind, "object": object })
}

/// `GET collection?watch=1`: the streamed answer.
pub fn start(shared: &Arc<Shared>, req: &ApiRequest, t: &Target) -> Result<Reply, ApiError> {
    let selectors = selectors(req)?;
    let from = parse_rv(req.param("resourceVersion"))?;
    let timeout = req.param("timeoutSeconds").parse().ok();
    let timeout = timeout.map(Duration::from_secs).unwrap_or(DEFAULT_TIMEOUT);
    let every = shared.bookmark_interval();
    let bookmarks = super::http::is_true(req.param("allowWatchBookmarks"));
    let mut watch = Watch {
        shared: shared.clone(),
        resource: t.resource,
        ns: t.ns.clone(),
        selectors,
        sent: 0,
        queue: VecDeque::new(),
        changed: shared.changed.subscribe(),
        deadline: Instant::now() + timeout,
        bookmark: bookmarks.then(|| Instant::now() + every),
        done: false,
        metadata_only: super::http::metadata_only(req),
    };
    // With sendInitialEvents, the current state comes first whatever the
    // resourceVersion, ended by a BOOKMARK marked initial-events-end.
    let initial_events = super::http::is_true(req.param("sendInitialEvents"));
    watch.begin(from.filter(|_| !initial_events), initial_events);
    let stream = futures_util::stream::unfold(watch, next_line);
    let body = StreamBody::new(stream).boxed_unsync();
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private")
        .body(body)
        .unwrap())
}

impl Watch {
    fn wanted(&self, object: &Value) -> bool {
        let ns = object["metadata"]["namespace"].as_str().unwrap_or("");
        (self.ns.is_empty() || ns == self.ns) && self.selectors.matches(object)
    }

    /// The first events: the current objects, or the 410 ERROR.
    fn begin(&mut self, from: Option<u64>, initial_events: bool) {
        self.changed.borrow_and_update();
        let mut store = self.shared.store();
        *store.watches.entry(self.resource.gvr()).or_default() += 1;
        match from {
            None if initial_events => {
                let all = store.items(self.resource, &self.ns, &self.selectors);
                self.queue
                    .extend(all.iter().map(|(_, o)| event("ADDED", o)));
                self.sent = store.rv;
                let end = json!({ "k8s.io/initial-events-end": "true" });
                self.queue.push_back(self.bookmark_event(Some(end)));
            }
            None => {
                let all = store.items(self.resource, &self.ns, &self.selectors);
                self.queue
                    .extend(all.iter().map(|(_, o)| event("ADDED", o)));
                self.sent = store.rv;
            }
            Some(rv) => match store.check_fresh(rv) {
                Ok(()) => self.sent = rv,
                Err(e) => {
                    self.queue.push_back(event("ERROR", &e.status()));
                    self.done = true;
                }
            },
        }
    }

    /// Queues the changes since the last look.
    fn catch_up(&mut self) {
        self.changed.borrow_and_update();
        let store = self.shared.store();
        let events = store.events_after(self.sent, self.resource);
        self.sent = store.rv;
        drop(store);
        let seen: Vec<Value> = events.iter().filter_map(|e| self.seen_as(e)).collect();
        self.queue.extend(seen);
    }

    /// The event as this watch's selectors see it: an object entering
    /// them is ADDED, one leaving them DELETED, as the real server does.
    fn seen_as(&self, e: &Event) -> Option<Value> {
        let now = self.wanted(&e.object);
        let before = e.previous.as_ref().map(|p| self.wanted(p));
        let kind = match (e.kind, before, now) {
            ("MODIFIED", Some(false), true) => "ADDED",
            ("MODIFIED", Some(true), false) => "DELETED",
            (_, _, false) => return None,
            (kind, _, true) => kind,
        };
        Some(event(kind, &e.object))
    }

    /// A BOOKMARK at what has been sent, with `annotations` if given.
    fn bookmark_event(&self, annotations: Option<Value>) -> Value {
        let r = self.resource;
        let mut object = json!({
            "kind": r.kind, "apiVersion": r.api_version(),
            "metadata": {"resourceVersion": self.sent.to_string()},
        });
        if let Some(a) = annotations {
            object["metadata"]["annotations"] = a;
        }
        event("BOOKMARK", &object)
    }

    fn queue_bookmark(&mut self) {
        self.queue.push_back(self.bookmark_event(None));
        self.bookmark = Some(Instant::now() + self.shared.bookmark_interval());
    }

    /// Until a write, a bookmark or the end.
    async fn wait(&mut self) {
        let far = Instant::now() + Duration::from_secs(86_400);
        tokio::select! {
            changed = self.changed.changed() => self.done = changed.is_err(),
            _ = sleep_until(self.bookmark.unwrap_or(far)) => {
                self.catch_up();
                self.queue_bookmark();
            }
            _ = sleep_until(self.deadline) => self.done = true,
        }
    }
}

async fn next_line(mut w: Watch) -> Option<(Result<Frame<Bytes>, Infallible>, Watch)> {
    loop {
        if let Some(mut e) = w.queue.pop_front() {
            if w.metadata_only && e["type"] != "ERROR" {
                e["object"] = super::http::partial(&e["object"]);
            }
            let mut line = serde_json::to_vec(&e).unwrap();
            line.push(b'\n');
            return Some((Ok(Frame::data(Bytes::from(line))), w));
        }
        if w.done {
            return None;
        }
        w.catch_up();
        if w.queue.is_empty() {
            w.wait().await;
        }
    }
}
