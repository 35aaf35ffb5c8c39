//! The Conveyor Belt (Eliá Algorithm 2, Gyro Algorithm 1), sans-IO.
//!
//! [`ConveyorBelt`] is one instance's protocol state machine: commutative and local requests
//! become storage jobs at once; global requests wait in the queue Q; the token carries
//! ⟨state update, origin⟩ entries around a fixed ring. Instance `i` is process `i`; a client
//! (`ensemble_app::ClosedLoopClient`) sends each request to its home instance and follows MAP
//! replies ([`ReplyBody::Redirect`](ensemble_core::ReplyBody::Redirect)). A token that no genuine
//! ring would deliver (wrong sender, a second token, entries out of order, a state update naming
//! what the schema lacks) is refused with an [`Effect::Refuse`](ensemble_core::Effect::Refuse)
//! and changes nothing: no message makes an instance panic.
//!
//! [`Belt`] names the protocol's types for the drivers: token messages, the SQL storage contract
//! of `ensemble_app::storage`, and [`BeltEvidence`] on every reply (class, instance, serial
//! position, and the rows read and written when the run records histories).

mod node;

pub use node::{Belt, BeltConfig, BeltEvidence, BeltStats, ConveyorBelt, GlobalExecution, Message, Token, TokenEntry};
