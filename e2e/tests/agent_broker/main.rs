//! The agent behind a message broker: the real `work-agent` binary, a test source that speaks
//! the source side as Maestro does (`test_support::maestro`) on a real wire, and a real spoke.
//! Each case is written once and runs on every transport it holds for: behind MQTT (a private
//! mosquitto, Maestro's agent command line, `--workload-source-driver=mqtt`), behind gRPC (the
//! CloudEvents gRPC service as sdk-go's broker serves it, the klusterlet's command line,
//! `--workload-source-driver=grpc`) and behind Pub/Sub (a private Google `pstest` fake built by
//! `e2e/scripts/pubsub-fake.sh`, Maestro's agent command line, `--workload-source-driver=pubsub`).
//! Filter by transport: `mqtt::`, `grpc::`, `pubsub::`, `mqtt_only::`, `grpc_only::`,
//! `pubsub_only::`. `cert_expiry::`: client certificate rotation behind a mosquitto and the gRPC
//! source that both refuse expired certificates. `drift::`: hand edits behind MQTT and gRPC.

#[path = "../agent_common/mod.rs"]
mod agent_common;
mod both;
mod cert_expiry;
mod drift;
mod env;
mod grpc_only;
mod mqtt_only;
mod pubsub_only;

/// Runs each case of `both` as a test behind each transport.
macro_rules! on_every_transport {
    ($($case:ident),* $(,)?) => {
        mod mqtt {
            $(
                #[tokio::test]
                async fn $case() {
                    crate::both::$case(test_support::broker_source::Transport::Mqtt).await;
                }
            )*
        }
        mod grpc {
            $(
                #[tokio::test]
                async fn $case() {
                    crate::both::$case(test_support::broker_source::Transport::Grpc).await;
                }
            )*
        }
        mod pubsub {
            $(
                #[tokio::test]
                async fn $case() {
                    crate::both::$case(test_support::broker_source::Transport::PubSub).await;
                }
            )*
        }
    };
}

on_every_transport!(
    create_update_delete_round_trip_and_a_stale_generation,
    a_restarted_agent_converges_on_what_changed_while_it_was_away,
    a_one_mebibyte_bundle_and_a_burst_of_two_hundred,
    a_job_completes_and_its_ttl_deletes_the_work,
    malformed_and_other_clusters_events_are_refused_and_counted,
    maestros_dashboard_metrics_move_while_a_bundle_is_applied,
    a_restarted_agent_does_not_apply_an_edit_to_a_completed_work,
    a_work_deleted_by_its_ttl_and_then_by_its_source_is_reported_deleted_twice,
    a_restart_marks_no_applied_work_of_a_work_the_source_still_has,
    a_ttl_deletion_the_source_lost_keeps_its_record_until_the_source_heard_it,
    a_resync_behind_a_small_ceiling_fits_and_heals_a_work_the_source_lost,
    a_status_over_the_ceiling_is_trimmed_and_says_so,
    a_late_copy_of_a_work_deleted_before_a_restart_stays_deleted,
    a_gated_manifest_waits_for_its_gate,
);
