//! What G-DUR processes send each other, and what a reply carries.

use crate::txn::{ReadRecord, Term};
use ensemble_group::commit::CommitMsg;
use ensemble_group::multicast::{AbMsg, GmMsg};
use ensemble_group::GroupId;
use ensemble_kv::store::Version;
use ensemble_kv::{Key, TxnId, Value};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Algorithm 1's `⟨REQ, Ti, x⟩`: a proxy asks a replica of `key` for a version.
    ReadReq { txn: TxnId, key: Key },
    /// `⟨REPLY, Ti, x_j⟩`.
    ReadReply { txn: TxnId, key: Key, version: Version },
    /// Algorithm 3's `⟨VOTE, Ti, v⟩`, for the voter's whole group.
    Vote { txn: TxnId, group: GroupId, vote: bool },
    /// A write replica or proxy still missing a vote asks for it again.
    VoteReq { txn: TxnId },
    /// A write replica tells the proxy how `txn` ended (P-Store: "send the outcome to Proxy(T)").
    Outcome { txn: TxnId, commit: bool },
    /// A proxy that heard no outcome asks again.
    OutcomeReq { txn: TxnId },
    /// Genuine atomic multicast (AM-Cast) of terms.
    Gm(GmMsg<Term>),
    /// Atomic broadcast (AB-Cast) of terms.
    Ab(AbMsg<Term>),
    /// Atomic commitment by two-phase commit (Algorithm 4): PREPARE carries the term.
    Tpc(CommitMsg<Term>),
}

impl Msg {
    /// The message's kind, for the per-kind counters of messages sent.
    pub fn kind(&self) -> &'static str {
        use ensemble_group::multicast::GmMsg as G;
        match self {
            Msg::ReadReq { .. } => "sent.read_req",
            Msg::ReadReply { .. } => "sent.read_reply",
            Msg::Vote { .. } => "sent.vote",
            Msg::VoteReq { .. } => "sent.vote_req",
            Msg::Outcome { .. } => "sent.outcome",
            Msg::OutcomeReq { .. } => "sent.outcome_req",
            Msg::Gm(G::Cast { .. }) => "sent.gm_cast",
            Msg::Gm(G::Ordered { .. }) => "sent.gm_ordered",
            Msg::Gm(G::Proposal { .. }) => "sent.gm_proposal",
            Msg::Gm(G::Settled { .. }) => "sent.gm_settled",
            Msg::Gm(G::Decided { .. }) => "sent.gm_decided",
            Msg::Gm(G::Ack { .. }) => "sent.gm_ack",
            Msg::Gm(G::Group(_)) => "sent.gm_consensus",
            Msg::Ab(_) => "sent.ab",
            Msg::Tpc(CommitMsg::Prepare { .. }) => "sent.2pc_prepare",
            Msg::Tpc(CommitMsg::Vote { .. }) => "sent.2pc_vote",
            Msg::Tpc(CommitMsg::Decision { .. }) => "sent.2pc_decision",
            Msg::Tpc(CommitMsg::Ack { .. }) => "sent.2pc_ack",
        }
    }
}

/// Where a transaction ran, in P-Store's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Class {
    /// Every replica of the transaction replicates all of its items.
    pub local: bool,
    pub read_only: bool,
}

impl Class {
    pub const NAMES: [&'static str; 4] = ["local-ro", "local-update", "global-ro", "global-update"];

    pub fn name(self) -> &'static str {
        match (self.local, self.read_only) {
            (true, true) => "local-ro",
            (true, false) => "local-update",
            (false, true) => "global-ro",
            (false, false) => "global-update",
        }
    }
}

/// What a reply says for the harness and the checker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub txn: TxnId,
    pub class: Class,
    /// Whether it went through certification (local read-only transactions need not).
    pub certified: bool,
    pub reads: Vec<ReadRecord>,
    pub writes: Vec<(Key, Value)>,
    /// Time from the request's arrival at the proxy to its submission (Algorithm 1's
    /// execution); the rest of the latency is termination.
    pub execution: Duration,
}
