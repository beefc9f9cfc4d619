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

/// Serves `metrics` on `listener` until the runtime stops.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    loop {
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
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
                let r = respond(&metrics, req.method(), req.uri().path(), accept);
                async move { Ok::<_, Infallible>(r) }
            });
            if let Err(e) =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), service).await
            {
                tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

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
