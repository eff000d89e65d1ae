//! `routes[].error_pages`: an upstream answer of a listed status is
//! replaced by the error pool's page, as ingress-nginx's
//! `custom-http-errors` sends it to the default backend: the gateway asks
//! that pool with a `GET` of the same path and the headers the ingress-nginx
//! error backends read, and the client gets that answer. Only for a
//! request without a body (the body is the application's, and may be
//! gone), and once per request.

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::ctx::Ctx;
use crate::config::ErrorPages;

/// The error pages of the request's route when `status` is one of theirs
/// and the request may be asked again.
pub fn wanted<'c>(session: &Session, ctx: &'c Ctx, status: u16) -> Option<&'c ErrorPages> {
    let pages = ctx.route()?.actions.error_pages.as_ref()?;
    let req = session.req_header();
    let bodiless = !req.headers.contains_key(http::header::TRANSFER_ENCODING)
        && req
            .headers
            .get(http::header::CONTENT_LENGTH)
            .is_none_or(|v| v.as_bytes() == b"0");
    let fresh = ctx.upstream.error_page.is_none();
    (fresh && bodiless && pages.codes.contains(&status)).then_some(pages)
}

/// The request the error pool gets: a `GET` of the same path, without a
/// body, with `X-Code` (the upstream's status), `X-Format` (the client's
/// `Accept`), `X-Original-URI`, `X-Request-ID` and the route's headers.
pub fn request(
    ctx: &Ctx,
    session: &Session,
    code: u16,
    upstream: &mut RequestHeader,
) -> pingora::Result<()> {
    let Some(pages) = ctx.route().and_then(|r| r.actions.error_pages.as_ref()) else {
        return Ok(());
    };
    let original = session.req_header();
    let format = original
        .headers
        .get(http::header::ACCEPT)
        .cloned()
        .unwrap_or(http::HeaderValue::from_static("text/html"));
    let uri = original
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    upstream.set_method(http::Method::GET);
    for name in [
        http::header::CONTENT_LENGTH,
        http::header::TRANSFER_ENCODING,
    ] {
        upstream.remove_header(&name);
    }
    upstream.insert_header("x-code", code.to_string())?;
    upstream.insert_header("x-format", format)?;
    upstream.insert_header("x-original-uri", uri)?;
    upstream.insert_header("x-request-id", ctx.request_id.as_str())?;
    for (name, value) in &pages.headers {
        upstream.insert_header(name.clone(), value.clone())?;
    }
    Ok(())
}
