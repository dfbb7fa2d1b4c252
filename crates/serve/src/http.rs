//! HTTP API on tokio + hyper 1 (http1 only): hyper directly rather than a framework because
//! the API is three routes, and hyper leaves the body limit and per-request overhead in our
//! hands (the hot path target is 0.3 ms end to end). Requests wait for their turn here
//! (admission.rs); sandbox work then runs on the blocking pool.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use crate::admission::Refused;
use crate::engine::{ApiError, Engine};
use crate::error::{Error, Kind};

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
            let header_timeout = std::time::Duration::from_millis(eng.cfg.header_timeout_ms);
            let body =
                tokio::time::timeout(header_timeout, Limited::new(req.into_body(), max).collect());
            let body = match body.await {
                Ok(Ok(b)) => b.to_bytes(),
                Err(_) => {
                    eng.metrics.request("none", 408, 0.0);
                    return Ok(err(ApiError::new(
                        408,
                        "body_timeout",
                        format!(
                            "request body not received within {} ms",
                            header_timeout.as_millis()
                        ),
                    )));
                }
                Ok(Err(_)) => {
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
            if let Err(e) = check_event(&body) {
                eng.metrics.request("none", 400, 0.0);
                return Ok(err(e.into()));
            }
            let t0 = std::time::Instant::now();
            // Wait for a turn here, asynchronously (admission.rs), not on a blocking thread.
            // Names that are not handlers go straight to run() for their 400/404.
            let _ticket = if eng.is_handler(&name) {
                match eng.admission.admit(&name, eng.queue_wait()).await {
                    Ok(t) => Some(t),
                    Err(why) => {
                        eng.metrics.request("none", 503, t0.elapsed().as_secs_f64());
                        let msg = match why {
                            Refused::QueueFull(n) => format!(
                                "{n} requests already wait for '{name}' (max_queue_per_handler)"
                            ),
                            Refused::Timeout => {
                                format!("no sandbox for '{name}' became free in time")
                            }
                        };
                        return Ok(err(ApiError::new(503, "busy", msg)));
                    }
                }
            } else {
                None
            };
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
    let conns = Arc::new(tokio::sync::Semaphore::new(eng.cfg.max_connections));
    let header_timeout = std::time::Duration::from_millis(eng.cfg.header_timeout_ms);
    loop {
        // At the cap, stop accepting until a connection closes: the kernel's backlog holds
        // the next ones (and refuses past it), the engine's fds stay bounded.
        let Ok(permit) = conns.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of fds (EMFILE/ENFILE) or memory: back off instead of spinning on an
                // accept that fails at once.
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO)
                ) {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let eng = eng.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper::service::service_fn(move |req| handle(eng.clone(), req));
            // header_read_timeout also runs while a keep-alive connection waits for its
            // next request (hyper >= 1.6): an idle or slowloris client is closed.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(io, svc)
                .await;
            drop(permit);
        });
    }
}

/// Deepest nesting of arrays/objects a request body may have. The sandbox's reply wraps the
/// handler's result twice (`{"ok":..,"result":..}`, and an echo adds its own level) and the
/// engine parses replies with serde_json's limit of 128: 100 leaves room.
pub const MAX_DEPTH: usize = 100;
/// Most digits of an integer in a request body: python's int limit
/// (`sys.int_info.default_max_str_digits`, 4300) makes json.loads raise on more.
pub const MAX_INT_DIGITS: usize = 4300;

/// What valid JSON the sandbox's python would still fail on (and lose the sandbox over):
/// invalid UTF-8 (serde skips the strings it ignores without decoding them), nesting deeper
/// than [`MAX_DEPTH`] (serde's ignore does not count it), integers of more than
/// [`MAX_INT_DIGITS`] digits. `body` is already known to be valid JSON. One pass, no
/// allocation (but for the error). An error is of kind [`Kind::InvalidEvent`].
pub fn check_event(body: &[u8]) -> crate::error::Result<()> {
    let bad = |msg: String| Err(Error::new(Kind::InvalidEvent, msg));
    if std::str::from_utf8(body).is_err() {
        return bad("request body is not valid UTF-8".into());
    }
    let (n, mut i, mut depth) = (body.len(), 0, 0usize);
    while i < n {
        match body[i] {
            b'"' => {
                i += 1;
                while i < n && body[i] != b'"' {
                    i += if body[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return bad(format!("request body nests deeper than {MAX_DEPTH} levels"));
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = if body[i] == b'-' { i + 1 } else { i };
                let mut j = start;
                while j < n && body[j].is_ascii_digit() {
                    j += 1;
                }
                let int = !(j < n && matches!(body[j], b'.' | b'e' | b'E'));
                if int && j - start > MAX_INT_DIGITS {
                    return bad(format!(
                        "request body has an integer of {} digits (at most {MAX_INT_DIGITS})",
                        j - start
                    ));
                }
                while j < n && matches!(body[j], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                    j += 1;
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_checks() {
        let nest = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
        assert!(check_event(nest(MAX_DEPTH).as_bytes()).is_ok());
        let e = check_event(nest(MAX_DEPTH + 1).as_bytes()).unwrap_err();
        assert_eq!(e.kind(), Kind::InvalidEvent);
        assert_eq!(
            e.to_string(),
            format!("request body nests deeper than {MAX_DEPTH} levels")
        );
        let a = ApiError::from(e);
        assert_eq!((a.status, a.kind), (400, "bad_json"));
        // Brackets, digits and escaped quotes inside strings do not count.
        let s = format!("[\"{}\\\"{}\"]", "[".repeat(200), "1".repeat(5000));
        assert!(check_event(s.as_bytes()).is_ok(), "{s}");
        assert!(check_event("1".repeat(4300).as_bytes()).is_ok());
        assert!(check_event(format!("-{}", "1".repeat(4301)).as_bytes()).is_err());
        assert!(check_event(format!("{{\"a\":{}e5}}", "1".repeat(5000)).as_bytes()).is_ok());
        assert!(check_event(format!("[2,{}]", "1".repeat(4301)).as_bytes()).is_err());
        assert_eq!(
            check_event(b"\"\xff\"").unwrap_err().to_string(),
            "request body is not valid UTF-8"
        );
        assert!(check_event("\"\u{e9}\"".as_bytes()).is_ok());
    }
}
