//! The works whose status a status resync request asked for and that are not sent yet: each work
//! once, in the order it was first asked for, whatever the number of requests (a source splits
//! one resync into parts). The status itself is read when it is sent, so a burst of answers costs
//! a name per work until the wire takes it. Plain data; the broker hub locks it.

use std::collections::{HashSet, VecDeque};

/// Works to answer for, and the one being answered.
#[derive(Debug, Default)]
pub struct StatusAnswers {
    order: VecDeque<String>,
    queued: HashSet<String>,
    /// Taken from the queue, its status not yet handed to the client.
    answering: Option<String>,
}

impl StatusAnswers {
    /// Asks for `name`'s status to be sent; false when it waits already.
    pub fn ask(&mut self, name: String) -> bool {
        if !self.queued.insert(name.clone()) {
            return false;
        }
        self.order.push_back(name);
        true
    }

    /// The next work to answer for, marked as being answered until [`StatusAnswers::done`].
    pub fn take_next(&mut self) -> Option<String> {
        let name = self.order.pop_front()?;
        self.queued.remove(&name);
        self.answering = Some(name.clone());
        Some(name)
    }

    /// The work taken last is answered (or needs no answer any more).
    pub fn done(&mut self) {
        self.answering = None;
    }

    /// Whether `name`'s answer is still to be handed to the client.
    pub fn waits(&self, name: &str) -> bool {
        self.queued.contains(name) || self.answering.as_deref() == Some(name)
    }

    /// Works still to be answered for, the one in hand included.
    pub fn len(&self) -> usize {
        self.order.len() + usize::from(self.answering.is_some())
    }

    /// Nothing is left to answer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_work_once_in_the_order_first_asked_and_waiting_until_done() {
        let mut answers = StatusAnswers::default();
        assert!(answers.ask("a".into()));
        assert!(answers.ask("b".into()));
        assert!(!answers.ask("a".into()), "a second part naming a again");
        assert_eq!(answers.len(), 2);

        assert_eq!(answers.take_next().as_deref(), Some("a"));
        assert!(answers.waits("a"), "in hand until done");
        assert!(
            answers.ask("a".into()),
            "asked again while in hand: sent again"
        );
        answers.done();
        assert_eq!(answers.take_next().as_deref(), Some("b"));
        answers.done();
        assert_eq!(answers.take_next().as_deref(), Some("a"));
        answers.done();
        assert!(answers.is_empty());
        assert!(!answers.waits("a"));
        assert_eq!(answers.take_next(), None);
    }
}
