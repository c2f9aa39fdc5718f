//! An API server in a closure, for unit tests of code that talks to Kubernetes through a
//! `kube::Client`: every request is answered by `answer(method, path, body)` with a status code
//! and a JSON body, in process, with no network.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

/// A client whose requests `answer` serves: it gets the method, the path and the JSON body
/// (`Null` when there is none or it is not JSON) and returns the status code and reply.
pub fn fake_client<F>(default_namespace: &str, answer: F) -> kube::Client
where
    F: Fn(&str, &str, Value) -> (u16, Value) + Clone + Send + Sync + 'static,
{
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let answer = answer.clone();
        async move {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let raw = request.into_body().collect().await?.to_bytes();
            let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
            let (code, reply) = answer(&method, &path, body);
            let response = Response::builder()
                .status(StatusCode::from_u16(code)?)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(reply.to_string())))?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
        }
    });
    kube::Client::new(service, default_namespace)
}

/// The body of a Kubernetes `Status` failure with `code` and `reason`.
pub fn status_failure(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message,
    })
}
