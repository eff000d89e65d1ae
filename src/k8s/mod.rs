//! The Kubernetes vocabulary fairgate reads and writes, in one place: the
//! kinds of object (`Kind`), the API groups, the Gateway API's condition
//! types and reasons, and fairgate's own `RoutePolicy`. A leaf: it uses
//! nothing of the crate, and the offline import (`import/`) and the
//! controller (`cluster/`) both speak it, so a kind or a reason is never a
//! string literal elsewhere.

use kube::api::ApiResource;

pub mod route_policy;

/// The Gateway API's group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The group of fairgate's own kinds (`RoutePolicy`).
pub const POLICY_GROUP: &str = "fairgate.dev";
/// `RoutePolicy`'s version.
pub const POLICY_VERSION: &str = "v1alpha1";

/// The kinds fairgate reads: those the controller watches, and those the
/// offline import reads besides (a Deployment's replicas, its autoscaler).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    IngressClass,
    Ingress,
    Service,
    EndpointSlice,
    ConfigMap,
    Secret,
    Namespace,
    GatewayClass,
    Gateway,
    HTTPRoute,
    GRPCRoute,
    ReferenceGrant,
    RoutePolicy,
    Deployment,
    HorizontalPodAutoscaler,
}

impl Kind {
    const ALL: [Kind; 15] = [
        Kind::IngressClass,
        Kind::Ingress,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::ConfigMap,
        Kind::Secret,
        Kind::Namespace,
        Kind::GatewayClass,
        Kind::Gateway,
        Kind::HTTPRoute,
        Kind::GRPCRoute,
        Kind::ReferenceGrant,
        Kind::RoutePolicy,
        Kind::Deployment,
        Kind::HorizontalPodAutoscaler,
    ];

    /// Its `kind` as objects spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::IngressClass => "IngressClass",
            Kind::Ingress => "Ingress",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
            Kind::Namespace => "Namespace",
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::HTTPRoute => "HTTPRoute",
            Kind::GRPCRoute => "GRPCRoute",
            Kind::ReferenceGrant => "ReferenceGrant",
            Kind::RoutePolicy => "RoutePolicy",
            Kind::Deployment => "Deployment",
            Kind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
        }
    }

    /// The kind of this name (`Kind::name`).
    pub fn by_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::IngressClass | Kind::Namespace | Kind::GatewayClass
        )
    }

    /// Where the API serves it.
    pub fn resource(self) -> ApiResource {
        use k8s_openapi::api::apps::v1::Deployment;
        use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
        match self {
            Kind::IngressClass => ApiResource::erase::<IngressClass>(&()),
            Kind::Ingress => ApiResource::erase::<Ingress>(&()),
            Kind::Service => ApiResource::erase::<Service>(&()),
            Kind::EndpointSlice => ApiResource::erase::<EndpointSlice>(&()),
            Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            Kind::Secret => ApiResource::erase::<Secret>(&()),
            Kind::Namespace => ApiResource::erase::<Namespace>(&()),
            Kind::Deployment => ApiResource::erase::<Deployment>(&()),
            Kind::HorizontalPodAutoscaler => ApiResource::erase::<HorizontalPodAutoscaler>(&()),
            Kind::GatewayClass => grouped(self, GATEWAY_GROUP, "v1", "gatewayclasses"),
            Kind::Gateway => grouped(self, GATEWAY_GROUP, "v1", "gateways"),
            Kind::HTTPRoute => grouped(self, GATEWAY_GROUP, "v1", "httproutes"),
            Kind::GRPCRoute => grouped(self, GATEWAY_GROUP, "v1", "grpcroutes"),
            Kind::ReferenceGrant => grouped(self, GATEWAY_GROUP, "v1beta1", "referencegrants"),
            Kind::RoutePolicy => grouped(self, POLICY_GROUP, POLICY_VERSION, "routepolicies"),
        }
    }
}

fn grouped(kind: Kind, group: &str, version: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.name().into(),
        plural: plural.into(),
    }
}

/// The condition types of Gateway API status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    Accepted,
    Programmed,
    ResolvedRefs,
}

impl ConditionType {
    pub const fn name(self) -> &'static str {
        match self {
            ConditionType::Accepted => "Accepted",
            ConditionType::Programmed => "Programmed",
            ConditionType::ResolvedRefs => "ResolvedRefs",
        }
    }

    /// The reason a condition of this type gives when it holds.
    pub fn met(self) -> Reason {
        match self {
            ConditionType::Accepted => Reason::Accepted,
            ConditionType::Programmed => Reason::Programmed,
            ConditionType::ResolvedRefs => Reason::ResolvedRefs,
        }
    }
}

/// The reasons of Gateway API conditions fairgate writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Accepted,
    Programmed,
    ResolvedRefs,
    Invalid,
    InvalidKind,
    InvalidCertificateRef,
    InvalidRouteKinds,
    RefNotPermitted,
    BackendNotFound,
    UnsupportedValue,
    UnsupportedProtocol,
    ListenersNotValid,
    InvalidParameters,
    NoMatchingParent,
    NotAllowedByListeners,
    NoMatchingListenerHostname,
}

impl Reason {
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Accepted => "Accepted",
            Reason::Programmed => "Programmed",
            Reason::ResolvedRefs => "ResolvedRefs",
            Reason::Invalid => "Invalid",
            Reason::InvalidKind => "InvalidKind",
            Reason::InvalidCertificateRef => "InvalidCertificateRef",
            Reason::InvalidRouteKinds => "InvalidRouteKinds",
            Reason::RefNotPermitted => "RefNotPermitted",
            Reason::BackendNotFound => "BackendNotFound",
            Reason::UnsupportedValue => "UnsupportedValue",
            Reason::UnsupportedProtocol => "UnsupportedProtocol",
            Reason::ListenersNotValid => "ListenersNotValid",
            Reason::InvalidParameters => "InvalidParameters",
            Reason::NoMatchingParent => "NoMatchingParent",
            Reason::NotAllowedByListeners => "NotAllowedByListeners",
            Reason::NoMatchingListenerHostname => "NoMatchingListenerHostname",
        }
    }
}

/// One status condition, as the controller computes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub kind: ConditionType,
    pub status: bool,
    pub reason: Reason,
    pub message: String,
}

impl Condition {
    /// The condition holds, for its type's own reason.
    pub fn met(kind: ConditionType, message: &str) -> Condition {
        Condition {
            kind,
            status: true,
            reason: kind.met(),
            message: message.into(),
        }
    }

    /// The condition holds, for another reason (a Gateway is Accepted
    /// with `ListenersNotValid`).
    pub fn yes(kind: ConditionType, reason: Reason, message: &str) -> Condition {
        Condition {
            kind,
            status: true,
            reason,
            message: message.into(),
        }
    }

    pub fn no(kind: ConditionType, reason: Reason, message: &str) -> Condition {
        Condition {
            kind,
            status: false,
            reason,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_found_by_its_name_and_served_under_it() {
        for kind in Kind::ALL {
            assert_eq!(Kind::by_name(kind.name()), Some(kind));
            assert_eq!(kind.resource().kind, kind.name());
        }
        assert_eq!(Kind::by_name("ingress"), None, "names are case-sensitive");
    }
}
