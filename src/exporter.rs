//! The metrics endpoint of a mount: a hyper HTTP/1 server answering `GET /metrics` (and `HEAD`)
//! with the registry in the format the `Accept` header asks for (see `metrics::text`); 404
//! elsewhere, 405 for other methods.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use shrinkfs_fuse::metrics::{Format, Metrics};

/// The answer to one request.
pub fn respond(metrics: &Metrics, method: &Method, path: &str, accept: Option<&str>) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = status;
        r.headers_mut().insert(CONTENT_TYPE, "text/plain; charset=utf-8".parse().expect("a valid header"));
        r
    };
    if path != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n");
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: use GET\n");
        r.headers_mut().insert(ALLOW, "GET, HEAD".parse().expect("a valid header"));
        return r;
    }
    let format = Format::negotiate(accept);
    let body = if method == Method::HEAD { String::new() } else { metrics.render(format) };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(CONTENT_TYPE, format.content_type().parse().expect("a valid header"));
    r
}

/// How many connections the endpoint serves at once, and for how long each: a scraper needs one
/// for a moment, and idle or half-sent ones kept open without end took the descriptors the
/// filesystem needs (past its limit every file operation failed with `EIO`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait to be accepted.
    pub connections: usize,
    /// A connection is closed after this long, whatever it is doing (a scraper reconnects).
    pub lifetime: std::time::Duration,
}

/// How long a connection past its lifetime may take to finish the request it is answering.
const GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Default for Limits {
    fn default() -> Self {
        Limits { connections: 32, lifetime: std::time::Duration::from_secs(30) }
    }
}

/// Serves `metrics` on `listener` until the runtime stops.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    serve_within(listener, metrics, Limits::default()).await
}

/// [`serve`], within `limits`.
pub async fn serve_within(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, limits: Limits) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections.max(1)));
    loop {
        let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (sock, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
                let r = respond(&metrics, req.method(), req.uri().path(), accept);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), service);
            tokio::pin!(conn);
            let ended = match tokio::time::timeout(limits.lifetime, conn.as_mut()).await {
                Ok(ended) => ended,
                Err(_) => {
                    // A request being answered is answered first (a second at most), then the
                    // connection closes.
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(GRACE, conn).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_connection_left_idle_is_closed_and_its_slot_serves_the_next() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits { connections: 1, lifetime: std::time::Duration::from_millis(300) };
        tokio::spawn(serve_within(listener, Arc::new(Metrics::new()), limits));
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
        next.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), next.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the second connection was served once the idle one's lifetime ended");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), idle.read(&mut byte)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the idle connection was closed: {closed:?}");
    }

    fn body(r: Response<Full<Bytes>>) -> String {
        let b = futures::executor::block_on(r.into_body().collect()).unwrap().to_bytes();
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn only_get_of_metrics_is_served_in_the_format_asked_for() {
        let m = Metrics::new();
        let r = respond(&m, &Method::GET, "/metrics", None);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/plain; version=0.0.4; charset=utf-8");
        let text = body(r);
        assert!(text.contains("# TYPE shrinkfs_store_retries_total counter") && !text.contains("# EOF"), "{text}");
        let r = respond(&m, &Method::GET, "/metrics", Some("application/openmetrics-text; version=1.0.0"));
        assert_eq!(r.headers()[CONTENT_TYPE], "application/openmetrics-text; version=1.0.0; charset=utf-8");
        assert!(body(r).ends_with("# EOF\n"));
        assert_eq!(respond(&m, &Method::GET, "/", None).status(), StatusCode::NOT_FOUND);
        assert_eq!(respond(&m, &Method::GET, "/metricsx", None).status(), StatusCode::NOT_FOUND);
        let post = respond(&m, &Method::POST, "/metrics", None);
        assert_eq!(
            (post.status(), post.headers()[ALLOW].to_str().unwrap()),
            (StatusCode::METHOD_NOT_ALLOWED, "GET, HEAD")
        );
        assert!(body(respond(&m, &Method::HEAD, "/metrics", None)).is_empty());
    }
}
