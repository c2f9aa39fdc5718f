//! The safety-net resync (`--status-sync-period`): one sweep over the works' store that asks for
//! each work once a period, spread evenly over it, instead of a timer per work. A timer per work
//! kept a copy of the work's key twice in kube-runtime's scheduler, about 700 bytes a work; the
//! sweep holds the names of one round, about 50.

use std::time::Duration;

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::Instant;

/// Each work of `namespace` in `store`, once per `period`, evenly spread over it. The first
/// round starts one period from now (the watch's initial list has just queued every work); each
/// round takes the names the store holds when it starts, and a work gone from the store by its
/// turn is skipped. A work created during a round is swept in the next one.
pub fn sweep<K>(
    store: Store<K>,
    namespace: String,
    period: Duration,
) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    struct Round<K: Resource<DynamicType = ()> + Clone + 'static> {
        store: Store<K>,
        namespace: String,
        /// When the current round started (or the first one starts).
        start: Instant,
        /// The round's names, in the order they go out.
        names: Vec<Box<str>>,
        /// The next name's place in `names`.
        next: usize,
    }
    let round = Round {
        store,
        namespace,
        start: Instant::now() + period,
        names: Vec::new(),
        next: 0,
    };
    futures::stream::unfold(round, move |mut round| async move {
        loop {
            if round.next >= round.names.len() {
                // The round is over: the next one starts a period after it began.
                if !round.names.is_empty() {
                    round.start += period;
                }
                tokio::time::sleep_until(round.start).await;
                round.names = round
                    .store
                    .state()
                    .iter()
                    .filter_map(|work| work.meta().name.as_deref().map(Box::from))
                    .collect();
                round.next = 0;
                if round.names.is_empty() {
                    round.start += period;
                    continue;
                }
            }
            let place = round.next;
            round.next += 1;
            // `place / len` of the way through the period (u128: no overflow for any period).
            let offset = period.as_nanos() * place as u128 / round.names.len() as u128;
            let offset = Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX));
            tokio::time::sleep_until(round.start + offset).await;
            let key = ObjectRef::<K>::new(&round.names[place]).within(&round.namespace);
            if round.store.get(&key).is_some() {
                return Some((key, round));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::stored_work::StoredWork;
    use futures::StreamExt;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn work(name: &str) -> StoredWork {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "c1"}}))
            .expect("a work")
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Polls the sweep all the time, as the controller does, until `end`; each name with the
    /// time it went out.
    fn consume(
        store: Store<StoredWork>,
        period: Duration,
        end: Duration,
    ) -> tokio::sync::mpsc::UnboundedReceiver<(String, Duration)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let start = Instant::now();
        tokio::spawn(async move {
            let mut swept = Box::pin(sweep(store, "c1".into(), period));
            while let Ok(Some(key)) = tokio::time::timeout_at(start + end, swept.next()).await {
                assert_eq!(key.namespace.as_deref(), Some("c1"));
                let _ = tx.send((key.name, start.elapsed()));
            }
        });
        rx
    }

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn each_work_once_a_period_spread_evenly_and_only_while_it_is_stored() {
        let mut writer = Writer::<StoredWork>::default();
        writer.apply_watcher_event(&Event::Init);
        for name in ["a", "b", "c", "d"] {
            writer.apply_watcher_event(&Event::InitApply(work(name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let mut out = consume(writer.as_reader(), secs(40), secs(155));
        let mut next = async || out.recv().await.expect("a name");

        // The first round starts a period from now, one work every 10 s.
        let mut first = Vec::new();
        for _ in 0..4 {
            first.push(next().await);
        }
        let times: Vec<Duration> = first.iter().map(|(_, t)| *t).collect();
        assert_eq!(times, [secs(40), secs(50), secs(60), secs(70)]);
        let names: Vec<String> = first.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(sorted(names.clone()), ["a", "b", "c", "d"]);

        // The second round: once its first work went out, one of the others is deleted and a
        // new one created. The deleted one is left out, the new one waits for the next round.
        let (went, at) = next().await;
        assert_eq!(at, secs(80));
        let deleted = names.iter().find(|n| **n != went).expect("another").clone();
        writer.apply_watcher_event(&Event::Delete(work(&deleted)));
        writer.apply_watcher_event(&Event::Apply(work("e")));
        let mut second = vec![went];
        for _ in 0..2 {
            let (name, at) = next().await;
            assert!(at > secs(80) && at < secs(120), "{at:?}");
            second.push(name);
        }
        let kept: Vec<String> = names.into_iter().filter(|n| *n != deleted).collect();
        assert_eq!(sorted(second), sorted(kept.clone()));

        // The third round holds the new work, spread over the period.
        let mut third = Vec::new();
        for _ in 0..4 {
            third.push(next().await);
        }
        let times: Vec<Duration> = third.iter().map(|(_, t)| *t).collect();
        assert_eq!(times, [secs(120), secs(130), secs(140), secs(150)]);
        let mut expected = kept;
        expected.push("e".into());
        assert_eq!(
            sorted(third.into_iter().map(|(n, _)| n).collect()),
            sorted(expected)
        );
        assert!(out.recv().await.is_none(), "nothing more before the end");
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_store_is_looked_at_again_a_period_later() {
        let mut writer = Writer::<StoredWork>::default();
        let mut out = consume(writer.as_reader(), secs(30), secs(100));
        // Two empty rounds (at 30 s and 60 s), then a work appears.
        tokio::time::sleep(secs(75)).await;
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(work("a")));
        writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(out.recv().await, Some(("a".to_string(), secs(90))));
        assert_eq!(out.recv().await, None);
    }
}
