//! The cases that hold behind Pub/Sub (Google's fake server) as behind the wires they were
//! written for: Maestro's status resync requests (broadcast on Pub/Sub), feedback produced while
//! the server was away, and a server restart that loses every topic, subscription and message.

use test_support::broker_source::Transport;

#[tokio::test]
async fn status_resync_and_a_fake_server_restart_lose_nothing() {
    crate::mqtt_only::status_resync_and_a_broker_restart_lose_nothing_on(Transport::PubSub).await;
}

#[tokio::test]
async fn a_fake_server_restart_loses_nothing() {
    crate::grpc_only::a_server_restart_loses_nothing_on(Transport::PubSub, "Pub/Sub").await;
}
