//! The gRPC service of the front end: `Publish` hands events to the source, `Subscribe` streams
//! a cluster's events with the `subscription-id` header and heartbeats, as sdk-go's broker does.

use std::sync::Arc;
use std::task::{Context, Poll};

use cloudevents::grpc::from_proto;
use cloudevents::grpc::proto::{self, PublishRequest, SubscriptionRequest};
use cloudevents::types;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use super::front::{Front, Subscriber};
use crate::maestro::{Maestro, StatusOutcome, Taken};

/// What the service serves: the front end's state and the source.
#[derive(Clone)]
pub(super) struct Server {
    pub(super) front: Arc<Front>,
    pub(super) maestro: Arc<Maestro>,
}

/// The service: routes the two methods by path.
#[derive(Clone)]
pub(super) struct Service {
    pub(super) server: Server,
}

impl tower::Service<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let server = self.server.clone();
        match req.uri().path() {
            proto::PUBLISH_PATH => Box::pin(async move {
                let mut grpc =
                    tonic::server::Grpc::new(ProstCodec::<(), PublishRequest>::default());
                Ok(grpc.unary(Publish { server }, req).await)
            }),
            proto::SUBSCRIBE_PATH => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<
                    proto::CloudEvent,
                    SubscriptionRequest,
                >::default());
                Ok(grpc.server_streaming(Subscribe { server }, req).await)
            }),
            other => {
                let status = Status::unimplemented(format!("no method {other}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

struct Publish {
    server: Server,
}

impl tonic::server::UnaryService<PublishRequest> for Publish {
    type Response = ();
    type Future = BoxFuture<'static, Result<Response<()>, Status>>;

    fn call(&mut self, request: Request<PublishRequest>) -> Self::Future {
        let result = self
            .server
            .front
            .authorize(&request)
            .and_then(|()| publish(&self.server, request.into_inner()));
        Box::pin(async move { result.map(Response::new) })
    }
}

/// Hands the published event to the source and answers as the broker does: an event it cannot
/// read or a type it does not serve is `InvalidArgument`, a failing handler `FailedPrecondition`.
fn publish(server: &Server, request: PublishRequest) -> Result<(), Status> {
    let pb = request
        .event
        .ok_or_else(|| Status::invalid_argument("no event"))?;
    let decoded =
        from_proto(&pb).map_err(|e| format!("failed to convert protobuf to cloudevent: {e}"));
    match server
        .maestro
        .receive(decoded, |id| server.front.refuse(id))
    {
        Taken::Judged(StatusOutcome::Malformed(why))
        | Taken::NotAnEvent(why)
        | Taken::UnknownType(why) => Err(Status::invalid_argument(why)),
        Taken::Judged(_) | Taken::Answered(_) => Ok(()),
        // As a connection that broke before the call was answered: nothing applied.
        Taken::Lost => Err(Status::unavailable("lost in flight (test fault)")),
        Taken::Refused => Err(Status::failed_precondition("refused by the test")),
        Taken::BadResyncRequest(why) | Taken::Unanswered(why) => {
            Err(Status::failed_precondition(why))
        }
        Taken::Ignored(ty) => Err(Status::invalid_argument(format!(
            "unsupported event type {}",
            ty.as_type()
        ))),
    }
}

struct Subscribe {
    server: Server,
}

type EventStream = futures::stream::BoxStream<'static, Result<proto::CloudEvent, Status>>;

impl tonic::server::ServerStreamingService<SubscriptionRequest> for Subscribe {
    type Response = proto::CloudEvent;
    type ResponseStream = EventStream;
    type Future = BoxFuture<'static, Result<Response<EventStream>, Status>>;

    fn call(&mut self, request: Request<SubscriptionRequest>) -> Self::Future {
        let Server { front, maestro } = self.server.clone();
        let authorized = front.authorize(&request);
        let sub = request.into_inner();
        Box::pin(async move {
            authorized?;
            if sub.cluster_name.is_empty() {
                return Err(Status::invalid_argument(
                    "invalid subscription request: missing cluster name",
                ));
            }
            if sub.data_type != types::MANIFEST_BUNDLE_DATA_TYPE {
                return Err(Status::invalid_argument(format!(
                    "invalid subscription request: invalid data type {:?}",
                    sub.data_type
                )));
            }
            let id = uuid::Uuid::new_v4().to_string();
            let (tx, rx) = mpsc::unbounded_channel();
            let register = {
                let (front, id, tx) = (front.clone(), id.clone(), tx.clone());
                async move {
                    tokio::time::sleep(front.registration_delay).await;
                    front.lock().subscribers.insert(
                        id,
                        Subscriber {
                            cluster: sub.cluster_name,
                            tx: tx.clone(),
                        },
                    );
                    maestro.count_subscription();
                    // A weak sender: dropping the subscriber ends the stream.
                    tokio::spawn(heartbeats(front, tx.downgrade()));
                }
            };
            if front.registration_delay.is_zero() {
                register.await;
            } else {
                tokio::spawn(register);
            }
            let stream: EventStream = Box::pin(futures::stream::unfold(rx, |mut rx| async {
                rx.recv().await.map(|item| (item, rx))
            }));
            let mut response = Response::new(stream);
            if front
                .subscription_header
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                let value = id
                    .parse()
                    .map_err(|_| Status::internal("subscription id"))?;
                response
                    .metadata_mut()
                    .insert(proto::SUBSCRIPTION_ID_HEADER, value);
            }
            Ok(response)
        })
    }
}

/// Sends a heartbeat every interval while heartbeats are on, until the stream is gone.
async fn heartbeats(
    front: Arc<Front>,
    tx: mpsc::WeakUnboundedSender<Result<proto::CloudEvent, Status>>,
) {
    let mut on = front.heartbeats.subscribe();
    let mut ticks = tokio::time::interval(front.heartbeat_interval);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(tx) = tx.upgrade() else { return };
        if !*on.borrow_and_update() {
            continue;
        }
        let beat = proto::CloudEvent {
            id: uuid::Uuid::new_v4().to_string(),
            spec_version: "1.0".into(),
            r#type: types::HEARTBEAT_TYPE.into(),
            ..Default::default()
        };
        if tx.send(Ok(beat)).is_err() {
            return;
        }
        front.lock().heartbeats_sent += 1;
    }
}
