//! The closed-loop client every SQL application's run uses, whatever the protocol: it drives a
//! [`Workload`], sends each request to its home process, and follows redirects.

use crate::{ClientCtx, InstanceId, InteractionProgress, Workload};
use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, InteractionEnd, ReplyBody, Request, RequestError,
    Time, TimerId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Pause between a reply and the next request; for workloads made of web interactions, between
/// the last reply of an interaction and the first request of the next, as a browser's user
/// thinks between pages and not between the queries one page runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThinkTime {
    None,
    Constant(Duration),
    /// Exponentially distributed, as TPC-W's emulated browsers think.
    Exponential { mean: Duration },
}

/// A closed-loop client: one request outstanding at a time, sent to its home instance (the
/// closest one), following redirects (the belt's MAP replies) to the process that owns the
/// request's partition. Generic over the evidence `E` replies carry.
pub struct ClosedLoopClient<E> {
    id: ClientId,
    ctx: ClientCtx,
    workload: Box<dyn Workload>,
    rng: ChaCha8Rng,
    think: ThinkTime,
    next_seq: u64,
    in_flight: Option<InFlight>,
    next_timer: u64,
    /// No new request is issued at or after this time, so a run can drain and its history be
    /// complete.
    stop_at: Option<Time>,
    /// When the current web interaction's first request was issued.
    interaction_started: Option<Time>,
    _evidence: std::marker::PhantomData<fn() -> E>,
}

struct InFlight {
    request: Request,
    issued: Time,
    redirects: u32,
}

/// More redirects than instances means the instances disagree about the plan.
const MAX_REDIRECTS: u32 = 8;

impl<E> ClosedLoopClient<E> {
    pub fn new(id: ClientId, ctx: ClientCtx, workload: Box<dyn Workload>, seed: u64, think: ThinkTime) -> Self {
        // Each client its own stream: adding a client does not change the others' requests.
        let rng = ChaCha8Rng::seed_from_u64(seed ^ id.0.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        ClosedLoopClient { id, ctx, workload, rng, think, next_seq: 0, in_flight: None, next_timer: 0, stop_at: None, interaction_started: None, _evidence: std::marker::PhantomData }
    }

    pub fn stop_at(mut self, t: Time) -> Self {
        self.stop_at = Some(t);
        self
    }

    pub fn home(&self) -> InstanceId {
        self.ctx.home
    }

    fn issue(&mut self, now: Time, out: &mut Vec<ClientEffect<E>>) {
        if self.stop_at.is_some_and(|t| now >= t) {
            return;
        }
        let (txn, params) = self.workload.next(&mut self.rng, &self.ctx);
        self.next_seq += 1;
        let request = Request { client: self.id, seq: self.next_seq, txn, params };
        out.push(ClientEffect::Send { to: self.ctx.home.process(), request: request.clone() });
        self.in_flight = Some(InFlight { request, issued: now, redirects: 0 });
        self.interaction_started.get_or_insert(now);
    }

    fn think_then_issue(&mut self, now: Time, out: &mut Vec<ClientEffect<E>>) {
        let pause = match self.think {
            ThinkTime::None => Duration::ZERO,
            ThinkTime::Constant(d) => d,
            ThinkTime::Exponential { mean } => {
                let u: f64 = self.rng.random_range(f64::EPSILON..1.0);
                mean.mul_f64(-u.ln())
            }
        };
        if pause.is_zero() {
            self.issue(now, out);
        } else {
            let id = TimerId(self.next_timer);
            self.next_timer += 1;
            out.push(ClientEffect::SetTimer { id, after: pause });
        }
    }

    fn complete(&mut self, now: Time, f: InFlight, result: CompletionResult<E>, out: &mut Vec<ClientEffect<E>>) {
        if let CompletionResult::Done(done) = &result {
            self.workload.observe(&f.request.txn, &done.outcome);
        }
        let progress = self.workload.interaction();
        let interaction = match progress {
            InteractionProgress::Ended(name) => {
                self.interaction_started.take().map(|started| InteractionEnd { name: name.to_string(), started })
            }
            InteractionProgress::Unpaged | InteractionProgress::Continues => None,
        };
        out.push(ClientEffect::Completed(Completion { request: f.request, issued: f.issued, completed: now, redirects: f.redirects, result, interaction }));
        if progress == InteractionProgress::Continues {
            self.issue(now, out);
        } else {
            self.think_then_issue(now, out);
        }
    }
}

impl<E> Client<E> for ClosedLoopClient<E> {
    fn id(&self) -> ClientId {
        self.id
    }

    fn on_event(&mut self, now: Time, event: ClientEvent<E>, out: &mut Vec<ClientEffect<E>>) {
        match event {
            ClientEvent::Start => self.think_then_issue(now, out),
            ClientEvent::Timer(_) => {
                if self.in_flight.is_none() {
                    self.issue(now, out)
                }
            }
            ClientEvent::Reply { reply, .. } => {
                let Some(mut f) = self.in_flight.take() else { return };
                if reply.seq != f.request.seq {
                    // A stale reply (cannot happen with one request outstanding, but harmless).
                    self.in_flight = Some(f);
                    return;
                }
                match reply.body {
                    ReplyBody::Redirect { to } if f.redirects < MAX_REDIRECTS => {
                        f.redirects += 1;
                        out.push(ClientEffect::Send { to, request: f.request.clone() });
                        self.in_flight = Some(f);
                    }
                    ReplyBody::Redirect { to } => {
                        let e = RequestError::Storage {
                            txn: f.request.txn.clone(),
                            message: format!("redirected {} times, last to {to}: processes disagree on the plan", f.redirects),
                        };
                        self.complete(now, f, CompletionResult::Error(e), out);
                    }
                    ReplyBody::Done(done) => self.complete(now, f, CompletionResult::Done(done), out),
                    ReplyBody::Error(e) => self.complete(now, f, CompletionResult::Error(e), out),
                }
            }
        }
    }

    /// Past `stop_at` with nothing in flight: a thinking client's timer would issue nothing.
    fn finished(&self, now: Time) -> bool {
        self.stop_at.is_some_and(|t| now >= t) && self.in_flight.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::{Done, Outcome, Reply, Value};
    use rand::RngCore;

    struct Always;

    impl Workload for Always {
        fn next(&mut self, _rng: &mut dyn RngCore, _ctx: &ClientCtx) -> (String, Vec<Value>) {
            ("t".into(), Vec::new())
        }
    }

    fn ms(n: u64) -> Time {
        Time::from_duration(Duration::from_millis(n))
    }

    #[test]
    fn a_client_is_finished_past_its_stop_time_once_nothing_is_in_flight() {
        let ctx = ClientCtx { client_index: 0, home: InstanceId(0), instances: 1 };
        let mut c = ClosedLoopClient::<()>::new(ClientId(0), ctx, Box::new(Always), 7, ThinkTime::Constant(Duration::from_millis(5))).stop_at(ms(10));
        let mut out = Vec::new();
        c.on_event(ms(0), ClientEvent::Start, &mut out);
        c.on_event(ms(5), ClientEvent::Timer(TimerId(0)), &mut out);
        assert!(matches!(out.last(), Some(ClientEffect::Send { .. })), "{}", out.len());
        // In flight across its stop time: not finished until the reply.
        assert!(!c.finished(ms(4)) && !c.finished(ms(12)));
        let reply = Reply { client: ClientId(0), seq: 1, body: ReplyBody::Done(Done { outcome: Outcome::Committed(Vec::new()), evidence: () }) };
        c.on_event(ms(12), ClientEvent::Reply { from: ensemble_core::ProcessId(0), reply }, &mut out);
        // Thinking with a timer set, but past its stop time the timer would issue nothing.
        assert!(matches!(out.last(), Some(ClientEffect::SetTimer { .. })));
        assert!(c.finished(ms(12)));
        // Without a stop time a client never finishes.
        let ctx = ClientCtx { client_index: 1, home: InstanceId(0), instances: 1 };
        let idle = ClosedLoopClient::<()>::new(ClientId(1), ctx, Box::new(Always), 7, ThinkTime::None);
        assert!(!idle.finished(ms(1_000_000)));
    }
}
