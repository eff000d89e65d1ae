//! The controller itself, said in the report: how many pods enforced the
//! limits (`--replicas`, its HorizontalPodAutoscaler or Deployment), the
//! admin listener, and the defaults ingress-nginx applied that the routes
//! now carry (the 5 s connect timeout, HSTS on TLS hosts).

use super::draft::Draft;
use super::Verdict;

use crate::k8s::Kind;

/// `--replicas`, else the controller's HorizontalPodAutoscaler (its
/// maximum) or Deployment, else 1.
pub fn replicas(draft: &mut Draft<'_>) {
    let subject = "controller";
    if let Some(n) = draft.options.replicas {
        draft.replicas = n.max(1);
        let why = format!("{n} pods, from --replicas");
        draft.line(subject, "replicas", Verdict::Mapped(why));
        return;
    }
    let controller = draft.objects.iter().copied().find(|o| {
        o.is(Kind::Deployment)
            && (o.name.contains("ingress-nginx")
                || o.value.to_string().contains("ingress-nginx/controller"))
    });
    let hpa = controller.and_then(|d| {
        draft.objects.iter().copied().find(|o| {
            o.is(Kind::HorizontalPodAutoscaler)
                && o.text(&["spec", "scaleTargetRef", "name"]).as_deref() == Some(&d.name)
        })
    });
    let (n, verdict) = match (controller, hpa) {
        (_, Some(h)) => {
            let max = h
                .text(&["spec", "maxReplicas"])
                .and_then(|t| t.parse().ok())
                .unwrap_or(1);
            let min = h
                .text(&["spec", "minReplicas"])
                .unwrap_or_else(|| "1".into());
            let why = format!(
                "HorizontalPodAutoscaler {} scales {min} to {max} pods; the fleet limits admit what {max} pods did (give --replicas to choose)",
                h.id()
            );
            (max, Verdict::Approximated(why))
        }
        (Some(d), None) => {
            let n = d
                .text(&["spec", "replicas"])
                .and_then(|t| t.parse().ok())
                .unwrap_or(1);
            (
                n,
                Verdict::Mapped(format!("{n} pods, from Deployment {}", d.id())),
            )
        }
        (None, None) => (
            1,
            Verdict::Approximated(
                "no --replicas and no controller Deployment among the inputs: 1 pod assumed".into(),
            ),
        ),
    };
    draft.replicas = n.max(1);
    draft.line(subject, "replicas", verdict);
}

/// The connect timeout ingress-nginx used when its ConfigMap did not say.
pub fn defaults_said(draft: &mut Draft<'_>) {
    if draft.globals.timeouts[0].is_none() {
        let why =
            "connect_timeout: 5s on every pool, ingress-nginx's default (fairgate's own is 1s)";
        draft.line(
            "controller",
            "proxy-connect-timeout",
            Verdict::Mapped(why.into()),
        );
    }
}

/// The HSTS header ingress-nginx sent on its TLS hosts, when there are any.
pub fn hsts_said(draft: &mut Draft<'_>) {
    let Some(value) = draft
        .globals
        .hsts
        .value()
        .filter(|_| !draft.tls_hosts.is_empty())
    else {
        return;
    };
    let why = format!(
        "response_headers.set Strict-Transport-Security: \"{value}\" on the routes of hosts with a TLS section, \
         as ingress-nginx sent it (ConfigMap hsts, hsts-max-age, hsts-include-subdomains, hsts-preload); \
         on the upstream's answers, over plain HTTP too (browsers ignore it there), and not on the gateway's \
         own answers (refusals, redirects)"
    );
    draft.line("controller", "hsts", Verdict::Approximated(why));
}

/// `admin.listen`, said: its endpoints answer without authentication.
pub fn admin(draft: &mut Draft<'_>) {
    let listen = draft.options.admin_listen.clone();
    let loopback = listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    let why = if loopback {
        format!(
            "{listen}: /healthz, /readyz and /metrics answer without authentication, on loopback only; \
             for kubelet probes or a Prometheus scrape by pod IP give --admin-listen 0.0.0.0:9090 \
             and reach that port only from inside the cluster \
             (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the traffic Service)"
        )
    } else {
        format!(
            "{listen}, from --admin-listen: /healthz, /readyz and /metrics answer anyone who reaches it, \
             without authentication; reach that port only from inside the cluster \
             (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the traffic Service)"
        )
    };
    draft.line("controller", "admin.listen", Verdict::Mapped(why));
}
