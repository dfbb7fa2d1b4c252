//! HTTP API on tokio + hyper 1 (http1 only): hyper directly rather than a framework because
//! the API is three routes, and hyper leaves the body limit and per-request overhead in our
//! hands (the hot path target is 0.3 ms end to end). Sandbox work runs on the blocking pool.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use crate::engine::{ApiError, Engine};

type Resp = Response<Full<Bytes>>;

fn json(status: u16, body: Vec<u8>) -> Resp {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn err(e: ApiError) -> Resp {
    json(e.status, e.body())
}

async fn handle(eng: Arc<Engine>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let r = match (method, path.as_str()) {
        (Method::GET, "/status") => json(200, serde_json::to_vec_pretty(&eng.status()).unwrap()),
        (Method::GET, "/healthz") => json(200, b"{\"ok\":true}".to_vec()),
        (Method::GET, "/metrics") => Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(eng.metrics.render(&eng.gauges()))))
            .unwrap(),
        (Method::POST, p) if p.starts_with("/run/") => {
            let name = p["/run/".len()..].to_string();
            let max = eng.cfg.max_body_bytes;
            let too_big = req
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok())
                .is_some_and(|n| n > max);
            if too_big {
                eng.metrics.request("none", 413, 0.0);
                return Ok(err(ApiError::new(
                    413,
                    "too_large",
                    format!("request body over {max} bytes"),
                )));
            }
            let body = match Limited::new(req.into_body(), max).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    eng.metrics.request("none", 413, 0.0);
                    return Ok(err(ApiError::new(
                        413,
                        "too_large",
                        format!("request body over {max} bytes"),
                    )));
                }
            };
            let body = if body.iter().all(|b| b.is_ascii_whitespace()) {
                Bytes::from_static(b"null")
            } else {
                body
            };
            if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
                eng.metrics.request("none", 400, 0.0);
                return Ok(err(ApiError::new(
                    400,
                    "bad_json",
                    "request body is not valid JSON",
                )));
            }
            let t0 = std::time::Instant::now();
            let e2 = eng.clone();
            let r = tokio::task::spawn_blocking(move || e2.run(&name, &body)).await;
            match r {
                Ok(Ok(ok)) => {
                    let mut resp = json(200, ok.body);
                    resp.headers_mut()
                        .insert("x-sprout-path", ok.path.parse().unwrap());
                    resp.headers_mut().insert(
                        "x-sprout-engine-us",
                        t0.elapsed().as_micros().to_string().parse().unwrap(),
                    );
                    resp
                }
                Ok(Err(e)) => err(e),
                Err(_) => err(ApiError::new(500, "engine", "engine task panicked")),
            }
        }
        (_, "/status" | "/metrics" | "/healthz") => err(ApiError::new(405, "method", "use GET")),
        (_, p) if p.starts_with("/run/") => err(ApiError::new(405, "method", "use POST")),
        _ => err(ApiError::new(
            404,
            "not_found",
            "routes: POST /run/<handler>, GET /status, GET /metrics",
        )),
    };
    Ok(r)
}

pub async fn serve(eng: Arc<Engine>, listener: tokio::net::TcpListener) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        let eng = eng.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper::service::service_fn(move |req| handle(eng.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}
